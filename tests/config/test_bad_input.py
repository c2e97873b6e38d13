"""Bad input, catalogued: every config key with wrong values, unusable paths, a busy port.

(test_config.py holds the combinations of keys that cannot run together.)

Each case asserts that the message names the key or the problem and that nothing runs; the
command-line cases also assert a non-zero exit within a time limit (never a hang).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from linkbench.config.machine import Machine
from linkbench.config.registry import options
from linkbench.config.schema import Config
from linkbench.errors import ConfigError
from linkbench.launcher.planning import plan_job

from ..conftest import QUICK, clean_env, load_result, run_cli

CPU = Machine(cuda_devices=0)
# Keys whose wrong values show only with another option chosen.
CONTEXT = {
    "model.vocab_size": ["model=gpt"],
    "model.seq_len": ["model=gpt"],
    "data.size": ["data=fake"],
    "debug.crash_rank": ["debug.crash_at_step=1"],
    "interconnect.rate_gbit_s": ["interconnect=emulated"],
    "interconnect.delay_ms": ["interconnect=emulated"],
    "interconnect.jitter_ms": ["interconnect=emulated"],
}
ZERO_ALLOWED = {
    "untimed_steps", "scaling.lr_warmup_steps", "model.weight_decay", "data.num_workers",
    "task.no_sync_steps", "task.warmup_iters", "checkpoint.every_steps", "debug.crash_rank",
    "debug.step_delay_ms", "debug.comm_delay_ms", "debug.log_delay_ms", "eval.every_steps",
    "hw_sample_hz",
    "scaling.lr_warmup_epochs", "interconnect.delay_ms", "interconnect.jitter_ms",
}  # fmt: skip
ANY_INTEGER = {"seed"}


def _leaves(node: dict, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key, value in node.items():
        if isinstance(value, dict) and key != "env":
            out += _leaves(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", value))
    return out


# Keys of the groups whose options are dataclasses of their own (task=allreduce's keys), with
# the first option that has each: the walk covers them with that option chosen.
OPTION_OF: dict[str, list[str]] = {}
for _group, _named in options().items():
    for _name, _option in _named.items():
        for _key, _ in _leaves(OmegaConf.to_container(OmegaConf.structured(_option)), f"{_group}."):
            OPTION_OF.setdefault(_key, [f"{_group}={_name}"])
SCHEMA = _leaves(OmegaConf.to_container(OmegaConf.structured(Config))) + [
    (key, value)
    for group, named in options().items()
    for option in named.values()
    for key, value in _leaves(OmegaConf.to_container(OmegaConf.structured(option)), f"{group}.")
    if key.split(".")[1] not in ("name", "_target_")
]
SCHEMA = list(dict(SCHEMA).items())  # each key once
NUMERIC = [k for k, v in SCHEMA if isinstance(v, (int, float)) and not isinstance(v, bool)]
NUMERIC += ["devices", "task.max_bytes", "debug.crash_at_step", "base_lr", "untimed_steps"]
NUMERIC += ["interconnect.rate_gbit_s", "ddp.bucket_cap_mb"]  # null unless set
TYPED = [
    k
    for k, v in SCHEMA
    if k not in ("base_lr", "model.arch") and (v is None or not isinstance(v, str))
]


def _context(key: str) -> list[str]:
    return OPTION_OF.get(key, []) + CONTEXT.get(key, [])


def test_the_walk_covers_every_group():
    prefixes = {key.split(".")[0] for key in NUMERIC}
    assert {
        "model", "data", "ddp", "strategy", "task", "scaling", "checkpoint", "debug"
    } <= prefixes  # fmt: skip
    assert "strategy.comm_hook.wire_factor" in NUMERIC  # a group's keys inside an option's


OUT_OF_RANGE = [
    (key, value)
    for key in sorted(set(NUMERIC) - ANY_INTEGER)
    for value in (-5, 0)
    if not (value == 0 and key in ZERO_ALLOWED)
]


@pytest.mark.parametrize(("key", "value"), OUT_OF_RANGE)
def test_every_numeric_key_refuses_values_out_of_range(compose_config, tmp_path, key, value):
    cfg = compose_config([*_context(key), f"{key}={value}"])
    with pytest.raises(ConfigError) as error:
        plan_job(cfg, str(tmp_path), [], CPU)
    message = str(error.value)
    assert key.split(".")[-1] in message, message
    assert "\n" not in message


@pytest.mark.parametrize("key", sorted(TYPED))
def test_every_key_refuses_a_value_of_the_wrong_type(compose_config, key):
    if key in ("interconnect.env", "task.ops"):
        value = "not-a-mapping" if key == "interconnect.env" else "[not_an_op]"
    else:
        value = "[1,2]" if key in ("data.root",) else "not-a-value"
    with pytest.raises(ConfigCompositionException) as error:
        compose_config([*_context(key), f"{key}={value}"])
    assert key.split(".")[-1] in f"{error.value} {error.value.__cause__}"


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["task=allreduce", "task.dtype=float7"], "task.dtype=float7 is not one of"),
        (["data=imagefolder", "data.root=/etc/hostname"], "is not a directory"),
    ],
)
def test_string_keys_and_paths_are_checked(compose_config, tmp_path, overrides, words):
    with pytest.raises(ConfigError) as error:
        plan_job(compose_config(overrides), str(tmp_path), [], CPU)
    assert words in str(error.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads and writes any directory")
def test_an_unreadable_data_folder_is_refused(compose_config, tmp_path):
    root = tmp_path / "images"
    (root / "cat").mkdir(parents=True)
    root.chmod(0)
    try:
        with pytest.raises(ConfigError) as error:
            plan_job(compose_config(["data=imagefolder", f"data.root={root}"]), "x", [], CPU)
    finally:
        root.chmod(0o755)
    assert "cannot be read" in str(error.value)


def _refused(args: list[str], words: str) -> subprocess.CompletedProcess:
    started = time.monotonic()
    done = run_cli(args, timeout=120)
    assert done.returncode != 0
    assert words in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - started < 60, "refusals are immediate"
    return done


def test_an_output_directory_inside_a_file_is_refused(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    _refused([f"hydra.run.dir={blocker}/job"], f"{blocker} is a file, not a directory")
    _refused(["-m", "seed=1,2", f"hydra.sweep.dir={blocker}/sweep"], "hydra.sweep.dir=")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_a_read_only_output_directory_is_refused(tmp_path):
    tmp_path.chmod(0o555)
    try:
        _refused([f"hydra.run.dir={tmp_path}/job"], "is not writable")
    finally:
        tmp_path.chmod(0o755)


def test_a_busy_exported_port_and_paths_with_spaces_do_not_stop_a_job(tmp_path):
    """Each job's rendezvous takes a free port of its own, whatever MASTER_PORT says."""
    job = tmp_path / "a folder with spaces" / "job"
    with socket.socket() as busy:
        busy.bind(("localhost", 0))
        busy.listen()
        env = {**clean_env(), "MASTER_ADDR": "localhost", "MASTER_PORT": str(busy.getsockname()[1])}
        done = run_cli([*QUICK, "task.no_sync_steps=0", f"hydra.run.dir={job}"], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert load_result(job)["status"] == "completed"
    assert (job / "rerun.yaml").is_file()


def test_a_missing_experiment_lists_the_committed_ones(tmp_path):
    done = _refused(["+experiment=nope", f"hydra.run.dir={tmp_path}"], "nope")
    assert "nvlink_vs_pcie" in done.stderr
    assert not Path(tmp_path / "result.json").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["model.loss=foo"], "model.loss=foo cannot be imported (ModuleNotFoundError"),
        (
            ["optimizer=adamw", "+optimizer.kwargs.betas=[0.9]"],
            "optimizer=adamw (torch.optim.AdamW with optimizer.kwargs={'betas': [0.9]}) "
            "cannot be built: IndexError",
        ),
        (["optimizer=sgd", "+optimizer.kwargs.nesterov_typo=true"], "nesterov_typo"),
        (
            ["strategy/comm_hook=powersgd", "strategy.comm_hook.hook._target_=torch.nope.hook"],
            "strategy.comm_hook.hook._target_=torch.nope.hook cannot be imported "
            "(ModuleNotFoundError",
        ),
    ],
    ids=[
        "a-loss-that-does-not-import",
        "an-optimizer-keyword-it-cannot-take",
        "an-unknown-keyword",
        "a-comm-hook-that-does-not-import",
    ],
)
def test_a_loss_hook_or_optimizer_that_cannot_be_built_is_refused_before_any_worker(
    tmp_path, args, words
):
    done = _refused([*args, f"hydra.run.dir={tmp_path / 'job'}"], words)
    assert done.stderr.strip().count("\n") == 0, "the sentence alone (no Hydra ERROR line)"
    assert not (tmp_path / "job" / "logs").exists(), "no worker started"


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (["step=50"], "step is not a key of linkbench's config; did you mean steps?"),
        (["optimizer.betas=[0.9]"], "did you mean optimizer.kwargs"),
        (["-m", "debug.step_delay=0,5"], "did you mean debug.step_delay_ms"),
        (["experiment=cpu_smoke"], "write +experiment=..."),
        (["steps=5", "untimed_steps=10"], "untimed_steps=10 must be at least 0 and below steps=5"),
        (["-m", "batch=8,8"], "remove the repeated value"),
        (
            [
                "-m",
                "batch=8,16",
                "scaling=linear,sqrt",
                "hydra.callbacks.sweep_summary.baseline=999",
            ],
            "baseline=999 needs an axis: this sweep varies batch, scaling, so none is the default",
        ),
    ],
    ids=[
        "unknown-key",
        "unknown-nested-key",
        "unknown-in-a-sweep",
        "experiment",
        "plan",
        "sweep",
        "a-baseline-without-an-axis",
    ],
)
def test_bad_input_is_its_sentence_alone_with_exit_status_2(tmp_path, args, sentence):
    """No Hydra lines around it ("Error executing job", "HYDRA_FULL_ERROR"), and for a key the
    schema lacks, the nearest keys it has (Hydra's own hint says to add it with +)."""
    done = _refused([*args, f"hydra.run.dir={tmp_path}/job", f"hydra.sweep.dir={tmp_path}/s"],
                    sentence)  # fmt: skip
    assert done.returncode == 2
    assert sentence in done.stderr.strip().splitlines()[-1]
    assert "HYDRA_FULL_ERROR" not in done.stderr and "Error executing job" not in done.stderr
    assert "+step" not in done.stderr


def test_a_download_that_cannot_reach_the_network_is_one_sentence(tmp_path):
    """data.download=true offline (here: every URL through a proxy on a closed port): one
    sentence saying how to provide the files, before any worker starts (before, an 80-line
    urllib traceback from rank 0)."""
    closed = "http://127.0.0.1:9"
    env = clean_env() | {
        k: closed for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")
    }
    done = run_cli(["data=cifar10", "data.download=true", f"data.root={tmp_path / 'data'}",
                    f"hydra.run.dir={tmp_path / 'job'}"], env=env, timeout=120)  # fmt: skip
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("data.download=true could not fetch CIFAR-10 into ")
    assert "cifar-10-python.tar.gz" in last and "Traceback" not in done.stderr
    assert not (tmp_path / "job" / "logs").exists() or not any(
        (tmp_path / "job" / "logs").iterdir()
    )


def test_keys_inside_a_dict_or_an_optional_dict_are_left_to_it():
    from linkbench.config.overrides import argument_problem
    from linkbench.config.registry import group_names

    def unknown_key(arguments: list[str], schema: type) -> str | None:
        return argument_problem(arguments, schema, group_names())

    known = ["strategy.comm_hook.hook._target_=x", "model.kwargs.depth=3"]
    assert unknown_key([*known, "optimizer.kwargs.eps=1e-6"], Config) is None
    hint = "did you mean strategy.comm_hook.hook"
    assert hint in str(unknown_key(["strategy.comm_hook.hok=x"], Config))


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (["-m", "batch=8,16", "batch=32,64"], "batch is given twice"),
        (["~steps"], "~steps deletes steps"),
        (["eval.enabled=2"], "eval.enabled is true or false or null, not 2"),
        (["-m", "compile=true,yes"], "compile is true or false, not yes"),
        (["model=[tiny,gpt]"], "sweep them: -m model=tiny,gpt"),
        (["ddp=[1]"], "gives the group ddp a list; a job takes one option of it: write ddp=1"),
        (["strategy/comm_hook=[fp16]"], "gives the group strategy/comm_hook a list"),
        (["eval=[1]"], "eval holds keys (batch, enabled, every_steps)"),
        (["batch=8", "optimizer=adamw", "task.ops=[all_reduce]"], None),
    ],
)
def test_arguments_that_cannot_mean_what_they_say_are_one_sentence(arguments, words):
    """Before: ``model=[tiny,gpt]`` merged both options into one, ``ddp=[1]`` ended in a
    traceback inside Hydra, ``eval=[1]`` in OmegaConf's "Cannot merge DictConfig with
    ListConfig", ``eval.enabled=2`` ran with evaluation on."""
    from linkbench.config.overrides import argument_problem
    from linkbench.config.registry import group_names

    problem = argument_problem([a for a in arguments if a != "-m"], Config, group_names())
    if words is None:
        assert problem is None
    else:
        assert problem is not None and words in problem, problem


@pytest.mark.parametrize(
    "given",
    [["strategy/comm_hook=fp16"], ["batch=8"], ["precision=bf16"], ["eval.enabled=true"],
     ["model=gpt"], ["data=digits"], ["compile=true"]],
)  # fmt: skip
def test_a_task_that_trains_nothing_refuses_training_settings(compose_config, tmp_path, given):
    """Before: ``task=allreduce strategy/comm_hook=fp16`` ran and ignored the hook, so a
    sweep over it compared two identical jobs."""
    texts = ["task=allreduce", *given]
    with pytest.raises(ConfigError, match=f"{given[0]} applies to a job that trains"):
        plan_job(compose_config(texts), str(tmp_path), texts, CPU)
    plain = ["task=allreduce", "task.iters=3", "seed=2", "dist_timeout_s=60"]
    plan_job(compose_config(plain), str(tmp_path), plain, CPU)  # its own keys and the job's


def test_data_the_ranks_could_not_read_is_refused_by_the_plan(compose_config, tmp_path):
    """An image folder with a class folder of no image, one whose first image is not one,
    held-out classes that are not the training ones; a CIFAR-10 folder with a file missing
    or not CIFAR-10's (torchvision refuses it on every rank by its MD5)."""
    from PIL import Image

    def folder(name: str, files: dict[str, bytes | None]) -> Path:
        root = tmp_path / name
        for path, content in files.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            if content is None:
                Image.new("RGB", (4, 4)).save(root / path)
            else:
                (root / path).write_bytes(content)
        return root

    good = {f"{c}/{i}.png": None for c in ("cat", "dog") for i in range(40)}
    cases = {
        "class folder(s) owl in": {**good, "owl/notes.txt": b"x"},
        "does not open as an image": {**good, "cat/0.png": b"not a png"},
        "different classes (dog, owl in one only)": {
            **{f"train/{k}": v for k, v in good.items()}, "val/cat/0.png": None,
            "val/owl/0.png": None,
        },
    }  # fmt: skip
    for index, (words, files) in enumerate(cases.items()):
        texts = ["data=imagefolder", f"data.root={folder(f'case{index}', files)}", "batch=4"]
        with pytest.raises(ConfigError, match=re.escape(words)):
            plan_job(compose_config(texts), str(tmp_path), texts, CPU)
    texts = ["data=imagefolder", f"data.root={folder('good', good)}", "batch=4"]
    plan_job(compose_config(texts), str(tmp_path), texts, CPU)
    batches = [f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6)]
    part = folder("part", {name: b"x" for name in batches[:2]})
    texts = ["data=cifar10", f"data.root={part}"]
    with pytest.raises(ConfigError, match="lacks data_batch_3, data_batch_4, data_batch_5, test"):
        plan_job(compose_config(texts), str(tmp_path), texts, CPU)
    whole = folder("whole", {name: b"x" for name in [*batches, "cifar-10-batches-py/test_batch"]})
    texts = ["data=cifar10", f"data.root={whole}"]
    with pytest.raises(ConfigError, match=re.escape("is not CIFAR-10's data_batch_1 (its MD5 is")):
        plan_job(compose_config(texts), str(tmp_path), texts, CPU)


def test_a_config_file_of_ones_own_that_means_otherwise_is_named_for_what_it_lacks(tmp_path):
    """Before: a primary config without linkbench's defaults was "model._target_ is not set",
    an experiment without its package line "experiment is not a key", a --config-path that
    does not exist "--config-name  names no config" with the name blank."""
    conf = tmp_path / "my_conf"
    (conf / "experiment").mkdir(parents=True)
    (conf / "mine.yaml").write_text("batch: 8\nsteps: 5\n")
    (conf / "experiment" / "nohdr.yaml").write_text("batch: 8\n")
    cases = {
        ("--config-dir", str(conf), "--config-name", "mine"): "this config chooses no model",
        ("--config-dir", str(conf), "+experiment=nohdr"): "+experiment=nohdr: experiment/"
        "nohdr.yaml does not start with `# @package _global_`",
        ("--config-path", str(tmp_path / "none")): f"--config-path {tmp_path / 'none'} is not a"
        " folder that exists",
    }
    for args, sentence in cases.items():
        done = _refused([*args, f"hydra.run.dir={tmp_path}/job"], sentence)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
