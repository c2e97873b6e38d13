"""A catalogue of bad input as users type it, and how each one must end.

Each case is a command line (``python run.py ARGS``) and the words its one sentence must
hold (the key, or what is wrong). :func:`outcome` runs one and says what went wrong with
how it ended, if anything: exit status 2, one line on stderr holding the words, none of
Hydra's lines around it, no traceback, no worker started, and within a minute.
``tests/config/test_bad_input_catalogue.py`` runs them all (slow); ``python -m
tests.config.bad_inputs`` prints the count.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# A YAML file that does not parse, for --config-dir (written by the runner).
BROKEN_YAML = "batch: [8, 16\nsteps: 5\n"


@dataclass(frozen=True)
class Case:
    args: tuple[str, ...]
    words: str
    """What the sentence must contain (case-insensitive)."""


def _c(words: str, *args: str) -> Case:
    return Case(tuple(args), words)


CASES: list[Case] = [
    # An option a group does not have (Hydra's MissingConfigException).
    _c("model=resnet", "model=resnet"),
    _c("precision=bf61", "precision=bf61"),
    _c("backend=mpi", "backend=mpi"),
    _c("interconnect=nvlnk", "interconnect=nvlnk"),
    _c("data=cifar", "data=cifar"),
    _c("optimizer=adam", "optimizer=adam"),
    _c("scaling=linaer", "scaling=linaer"),
    _c("profile=traces", "profile=traces"),
    _c("strategy/comm_hook=fp8", "strategy/comm_hook=fp8"),
    _c("comm_hook=fp8", "comm_hook=fp8"),
    _c("strategy=fdsp", "strategy=fdsp"),
    _c("task=trian", "task=trian"),
    _c("nccl=fast", "nccl=fast"),
    _c("model=resnet", "-m", "model=resnet18,resnet"),
    _c("nvlink_vs_pcei", "-m", "+experiment=nvlink_vs_pcei"),
    _c("experiment=nope", "+experiment=nope"),
    _c("hydra/launcher=slurm", "hydra/launcher=slurm"),
    _c("hydra/sweeper=optuna", "-m", "hydra/sweeper=optuna", "batch=8,16"),
    # A value of the wrong type (OmegaConf's validation errors).
    _c("steps=ten", "steps=ten"),
    _c("batch=abc", "batch=abc"),
    _c("batch=1.5", "batch=1.5"),
    _c("seed=x", "seed=x"),
    _c("base_lr=fast", "base_lr=fast"),
    _c("devices=two", "devices=two"),
    _c("log_every=often", "log_every=often"),
    _c("untimed_steps=some", "untimed_steps=some"),
    _c("compile=maybe", "compile=maybe"),
    _c("cuda_graphs", "cuda_graphs=2"),
    _c("dist_timeout_s=long", "dist_timeout_s=long"),
    _c("eval.enabled=perhaps", "eval.enabled=perhaps"),
    _c("eval.every_steps=x", "eval.every_steps=x"),
    _c("checkpoint.every_steps=often", "checkpoint.every_steps=often"),
    _c("ddp.bucket_cap_mb=big", "ddp.bucket_cap_mb=big"),
    _c("scaling.rule=cubic", "scaling.rule=cubic"),
    _c("scaling.decay=exp", "scaling.decay=exp"),
    _c("nccl.algo=Star", "nccl.algo=Star"),
    _c("nccl.proto=LL256", "nccl.proto=LL256"),
    _c("hw_sample_hz=fast", "hw_sample_hz=fast"),
    _c("steps=[1,2]", "steps=[1,2]"),
    _c("model.num_classes=ten", "model.num_classes=ten"),
    _c("profile.steps=x", "profile=trace", "profile.steps=x"),
    _c("repeats=many", "repeats=many"),
    _c("interconnect.rate_gbit_s=fast", "interconnect=emulated", "interconnect.rate_gbit_s=fast"),
    # A key the config does not have.
    _c("did you mean steps", "step=10"),
    _c("did you mean batch", "batchsize=32"),
    _c("did you mean model.arch", "model.archs=resnet18"),
    _c("did you mean hydra.sweeper.max_rounds", "-m", "batch=8,16", "hydra.sweeper.max_round=3"),
    _c("did you mean hydra.sweeper.min_rounds", "-m", "batch=8,16", "hydra.sweeper.min_round=2"),
    _c(
        "did you mean hydra.callbacks.sweep_summary.axis",
        "-m",
        "batch=8,16",
        "hydra.callbacks.sweep_summary.axes=batch",
    ),
    _c(
        "did you mean hydra.callbacks.sweep_summary.margin",
        "-m",
        "batch=8,16",
        "hydra.callbacks.sweep_summary.margn=0.05",
    ),
    _c("did you mean eval.enabled", "eval.enable=false"),
    _c("did you mean debug.crash_at_step", "debug.crash_step=3"),
    _c("did you mean seed", "+seeds=3"),
    _c("did you mean ddp.bucket_cap_mb", "ddp.bucket_mb=10"),
    _c("did you mean warmup_steps", "warmup_step=3"),
    _c("did you mean hw_sample_hz", "hw_sample=5"),
    _c("did you mean compile_mode", "compilemode=default"),
    # Values out of range, and numbers that cannot run together.
    _c("batch=0", "batch=0"),
    _c("batch=-8", "batch=-8"),
    _c("steps=0", "steps=0"),
    _c("steps=-3", "steps=-3"),
    _c("base_lr=-0.1", "base_lr=-0.1"),
    _c("devices=0", "devices=0"),
    _c("devices=-1", "devices=-1"),
    _c("log_every=0", "log_every=0"),
    _c("repeats=0", "repeats=0"),
    _c("dist_timeout_s=0", "dist_timeout_s=0"),
    _c("untimed_steps=-1", "untimed_steps=-1"),
    _c("epochs=-1", "epochs=-1"),
    _c("samples=0", "samples=0"),
    _c("hw_sample_hz=-1", "hw_sample_hz=-1"),
    _c("data.num_workers=-1", "data=fake", "data.num_workers=-1"),
    # A key the chosen option lacks: the options that have it.
    _c("data.size is not a key of data=digits; data=fake has it", "data=digits", "data.size=5"),
    _c("data=imagefolder and data=cifar10 have it", "data.root=/data"),
    _c("task=allreduce has it", "task.ops=[all_reduce]"),
    _c("data.root is not a key of data=fake", "data=fake", "data.root=/data"),
    _c("strategy=ddp and strategy=zero1 have it", "strategy=fsdp", "strategy.bucket_cap_mb=50"),
    _c("strategy=fsdp does not use", "strategy=fsdp", "ddp.bucket_cap_mb=50"),
    _c("model.weight_decay=-1", "model.weight_decay=-1"),
    _c("scaling.reference_batch=0", "scaling.reference_batch=0"),
    _c("ddp.bucket_cap_mb=0", "ddp.bucket_cap_mb=0"),
    _c("eval.batch=0", "eval.batch=0"),
    _c("checkpoint.every_steps=7", "checkpoint.every_steps=7"),
    _c("eval.every_steps=7", "eval.every_steps=7"),
    _c("steps=", "steps=20", "epochs=2"),
    _c("debug.crash_rank=5", "debug.crash_at_step=2", "debug.crash_rank=5"),
    _c("batch", "data=digits", "batch=2000"),
    _c("batch", "data=fake", "data.size=100", "batch=64"),
    _c("eval", "data=digits", "data.eval_fraction=1.5"),
    _c("interconnect.rate_gbit_s", "interconnect=emulated", "interconnect.rate_gbit_s=-1"),
    _c("interconnect.rate_gbit_s", "interconnect=emulated", "interconnect.rate_gbit_s=1e-7"),
    _c(
        "interconnect.delay_ms",
        "interconnect=emulated",
        "interconnect.rate_gbit_s=1",
        "interconnect.delay_ms=-5",
    ),
    _c("interconnect.nodes=0", "interconnect=emulated", "interconnect.nodes=0"),
    _c("interconnect.nodes=two", "interconnect=emulated", "interconnect.nodes=two"),
    _c("interconnect.nodes=3", "interconnect=emulated", "devices=4", "interconnect.nodes=3"),
    _c("interconnect.nodes=4", "interconnect=emulated", "interconnect.nodes=4"),
    # An uplink of its own rate: one rate per node, each a rate the link can be set to.
    _c(
        "gives 3 rate(s), but this job's link has 2 node(s)",
        "interconnect=emulated",
        "interconnect.uplink_rates_gbit_s=[1,1,0.5]",
    ),
    _c(
        "interconnect.uplink_rates_gbit_s[1]=0.0",
        "interconnect=emulated",
        "interconnect.uplink_rates_gbit_s=[1,0]",
    ),
    _c(
        "interconnect.uplink_rates_gbit_s[0]=1e-08",
        "interconnect=emulated",
        "interconnect.uplink_rates_gbit_s=[1e-8,1]",
    ),
    _c(
        "interconnect.uplink_rates_gbit_s",
        "interconnect=emulated",
        "interconnect.uplink_rates_gbit_s=[1,half]",
    ),
    _c(
        "interconnect.uplink_rates_gbit_s is not a key of interconnect=pcie",
        "interconnect=pcie",
        "interconnect.uplink_rates_gbit_s=[1,1]",
    ),
    # The link's settings are interconnect=emulated's own keys: another arm has none.
    _c(
        "interconnect.nodes is not a key of interconnect=pcie; interconnect=emulated has it",
        "interconnect=pcie",
        "interconnect.nodes=2",
    ),
    _c(
        "interconnect.delay_ms is not a key of interconnect=socket",
        "interconnect=socket",
        "interconnect.delay_ms=5",
    ),
    _c("strategy=hsdp", "strategy=hsdp"),
    _c("strategy=hsdp", "strategy=hsdp", "interconnect=emulated"),
    _c("strategy.replicas=1", "strategy=hsdp", "strategy.replicas=1"),
    _c(
        "strategy=hsdp with 3 replicas",
        "strategy=hsdp",
        "strategy.replicas=3",
        "devices=2",
        "interconnect=emulated",
        "interconnect.nodes=2",
    ),
    _c("task.max_bytes", "task=allreduce", "task.max_bytes=0"),
    _c("task.dtype=float7", "task=allreduce", "task.dtype=float7"),
    _c("model.vocab_size", "model=gpt", "model.vocab_size=0"),
    _c("model.seq_len", "model=gpt", "model.seq_len=-4"),
    # Options that cannot run together, or on this machine.
    _c("backend=nccl", "backend=nccl"),
    _c("cuda_graphs", "cuda_graphs=true"),
    _c("comm_hook", "strategy=fsdp", "comm_hook=powersgd"),
    # A group of an option the config did not choose, or chosen with a dot.
    _c("strategy/comm_hook=bf16 is a group of", "strategy=fsdp", "strategy/comm_hook=bf16"),
    _c(
        "strategy.comm_hook is not a key of strategy=fsdp",
        "strategy=fsdp",
        "+strategy/comm_hook=bf16",
    ),
    _c("write strategy/comm_hook=bf16", "strategy.comm_hook=bf16"),
    _c("configuration 3 of 4", "-m", "strategy=ddp,fsdp", "strategy/comm_hook=none,bf16"),
    _c("data.root", "data=imagefolder"),
    _c("data.root", "data=imagefolder", "data.root=/nonexistent/images"),
    _c("data.root", "data=imagefolder", "data.root=/etc/hostname"),
    _c("model.loss=foo", "model.loss=foo"),
    _c("optimizer", "optimizer=sgd", "+optimizer.kwargs.nesterov_typo=true"),
    # The summary's and the sweeper's keys, checked before the first job.
    _c("margin=-1", "-m", "batch=8,16", "hydra.callbacks.sweep_summary.margin=-1"),
    _c("margin=2", "-m", "batch=8,16", "hydra.callbacks.sweep_summary.margin=2"),
    _c("margin=abc", "-m", "batch=8,16", "hydra.callbacks.sweep_summary.margin=abc"),
    _c("family=foo", "-m", "batch=8,16", "hydra.callbacks.sweep_summary.family=foo"),
    _c("axis=seed", "-m", "batch=8,16", "hydra.callbacks.sweep_summary.axis=seed"),
    _c(
        "baseline=999",
        "-m",
        "batch=8,16",
        "hydra.callbacks.sweep_summary.axis=batch",
        "hydra.callbacks.sweep_summary.baseline=999",
    ),
    _c(
        "accuracy_tolerance=-1",
        "-m",
        "batch=8,16",
        "hydra.callbacks.sweep_summary.accuracy_tolerance=-1",
    ),
    _c("max_rounds=1", "-m", "batch=8,16", "hydra.sweeper.max_rounds=1"),
    _c("max_rounds=many", "-m", "batch=8,16", "hydra.sweeper.max_rounds=many"),
    _c("min_rounds=9", "-m", "batch=8,16", "hydra.sweeper.min_rounds=9"),
    _c("budget_s=-5", "-m", "batch=8,16", "hydra.sweeper.budget_s=-5"),
    _c("spending=foo", "-m", "batch=8,16", "hydra.sweeper.spending=foo"),
    _c("max_jobs", "-m", "batch=8,16", "hydra.sweeper.max_jobs=1"),
    _c("batch=8", "-m", "batch=8,8"),
    _c("repeats", "-m", "batch=8,16", "repeats=-2"),
    # Override syntax and paths.
    _c("batch=[8,16", "batch=[8,16"),
    _c("batch==8", "batch==8"),
    _c("batch=8,16", "batch=8,16"),
    _c("model=", "model="),
    _c("swept over no value", "-m", "batch=range(0)"),
    _c("swept over no value", "-m", "batch=range(16,8)"),
    _c("batch=range(8,16,0) cannot be expanded", "-m", "batch=range(8,16,0)"),
    _c("base_lr=interval(0.1,0.2) is a continuous interval", "-m", "base_lr=interval(0.1,0.2)"),
    _c("steps=interval(1,5)", "-m", "steps=interval(1,5)", "batch=8,16"),
    _c("oops", "batch=${oops}"),
    _c("hydra.run.dir", "hydra.run.dir=/proc/linkbench"),
    _c("hydra.sweep.dir", "-m", "batch=8,16", "hydra.sweep.dir=/proc/linkbench"),
    _c("--config-name", "--config-name", "nope"),
    _c("--config-dir", "--config-dir", "/nonexistent/conf"),
    _c("bad.yaml, line 2", "--config-dir", "{broken}", "+broken=bad"),
    # Numbers beyond what torch takes, and sizes the machine cannot hold (issue 48).
    _c("seed=99999999999999999999 is beyond a 64-bit integer", "seed=99999999999999999999"),
    _c("seed=-9007199254740993 is too large", "seed=-9007199254740993"),
    _c("steps=99999999999999999999", "steps=99999999999999999999"),
    _c(
        "task.warmup_iters=18446744073709551616",
        "task=allreduce",
        "task.warmup_iters=18446744073709551616",
    ),
    _c("devices=100000: 100000 ranks need about", "devices=100000"),
    _c("devices=5000", "-m", "devices=2,5000"),
    _c("not even one rank would fit", "batch=900000"),
    # A true/false key given anything else, a key deleted, a sweep given twice or one value
    # under two spellings.
    _c("eval.enabled is true or false or null, not 2", "eval.enabled=2"),
    _c("compile is true or false, not yes", "compile=yes"),
    _c("cudnn_benchmark is true or false or null, not 0", "-m", "cudnn_benchmark=true,0"),
    _c("~steps deletes steps", "~steps"),
    _c("~model.image_size deletes model.image_size", "~model.image_size"),
    _c("batch is given twice", "-m", "batch=8,16", "batch=32,64"),
    _c("seed is given twice", "-m", "seed=1", "seed=2,3"),
    _c("names batch=08 more than once (as 08 and 8)", "-m", "batch=08,8"),
    _c("names base_lr=0.1 more than once", "-m", "base_lr=0.1,1e-1"),
    # Output folders whose names the file system refuses.
    _c("more than the 255 a name may have", "hydra.run.dir=/tmp/" + "x" * 300),
    _c(
        "more than the 255 a name may have",
        "-m",
        "seed=1,2",
        "hydra.sweep.dir=/tmp/" + "z" * 260 + "/sweep",
    ),
    _c("its path is", "hydra.run.dir=/tmp/" + "/".join(["y" * 200] * 21)),
    # Settings a task that trains nothing would accept and ignore (issue 48).
    _c(
        "strategy/comm_hook=fp16 applies to a job that trains",
        "task=allreduce",
        "strategy/comm_hook=fp16",
    ),
    _c("batch=8 applies to a job that trains", "-m", "task=allreduce", "batch=8,16"),
    _c("precision=bf16 applies to a job that trains", "task=allreduce", "precision=bf16"),
    _c("eval.enabled=true applies to a job that trains", "task=allreduce", "eval.enabled=true"),
    _c(
        "model=gpt applies to a job that trains",
        "-m",
        "task=allreduce",
        "interconnect=nvlink,pcie",
        "model=gpt",
    ),
    # A list where one option, or keys, belong.
    _c("gives the group model a list", "model=[tiny,gpt]"),
    _c("gives the group ddp a list", "ddp=[1]"),
    _c("gives the group strategy/comm_hook a list", "strategy/comm_hook=[fp16,bf16]"),
    _c("eval holds keys", "eval=[1]"),
    _c("debug holds keys", "debug=[]"),
    # Config files of the user's own that say something other than they mean.
    _c("this config chooses no model", "--config-dir", "{broken}", "--config-name", "mine"),
    _c(
        "does not start with `# @package _global_`", "--config-dir", "{broken}", "+experiment=nohdr"
    ),
    _c("--config-path /nonexistent/conf is not a folder", "--config-path", "/nonexistent/conf"),
    # Data the plan can read but the ranks could not use.
    _c("hold no image", "data=imagefolder", "data.root={emptyclass}"),
    _c("does not open as an image", "data=imagefolder", "data.root={badimage}"),
    _c("is not CIFAR-10's data_batch_1", "data=cifar10", "data.root={badcifar}"),
    _c("lacks data_batch_3", "data=cifar10", "data.root={partcifar}"),
]


def _data_folders(tmp: Path) -> dict[str, Path]:
    """Data on disk for the cases that name it: an image folder with a class folder of no
    image, one whose first image is not one, a CIFAR-10 folder whose first batch is cut
    short, one that lacks a batch."""
    made = {name: tmp / name for name in ("emptyclass", "badimage", "badcifar", "partcifar")}
    (made["emptyclass"] / "cat").mkdir(parents=True, exist_ok=True)
    (made["emptyclass"] / "cat" / "notes.txt").write_text("no image here")
    (made["badimage"] / "dog").mkdir(parents=True, exist_ok=True)
    (made["badimage"] / "dog" / "0.jpg").write_bytes(b"not a jpeg")
    for name in ("badcifar", "partcifar"):
        batches = made[name] / "cifar-10-batches-py"
        batches.mkdir(parents=True, exist_ok=True)
        for file in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            if not (name == "partcifar" and file == "data_batch_3"):
                (batches / file).write_bytes(b"\x80\x02}q\x00(X")  # a pickle cut short
    return made


@dataclass(frozen=True)
class Outcome:
    case: Case
    returncode: int | None
    stderr: str
    seconds: float
    problems: tuple[str, ...]


HYDRA_LINES = ("HYDRA_FULL_ERROR", "Error executing job", "Traceback", "Primary config",
               "Available options", "Config search path")  # fmt: skip


def outcome(case: Case, tmp: Path, env: dict[str, str]) -> Outcome:
    """Run one case into ``tmp`` and list what is wrong with how it ended."""
    broken = tmp / "user_conf"
    broken.mkdir(parents=True, exist_ok=True)
    (broken / "broken").mkdir(exist_ok=True)
    (broken / "broken" / "bad.yaml").write_text(BROKEN_YAML)
    (broken / "mine.yaml").write_text("batch: 8\nsteps: 5\n")  # a primary config, no defaults
    (broken / "experiment").mkdir(exist_ok=True)
    (broken / "experiment" / "nohdr.yaml").write_text("batch: 8\n")  # no @package line
    args = [a.replace("{broken}", str(broken)) for a in case.args]
    for name, folder in _data_folders(tmp).items():
        args = [a.replace(f"{{{name}}}", str(folder)) for a in args]
    run_dir, sweep_dir = tmp / "job", tmp / "sweep"
    given = " ".join(args)
    extra = [] if "hydra.run.dir" in given else [f"hydra.run.dir={run_dir}"]
    extra += [] if "hydra.sweep.dir" in given else [f"hydra.sweep.dir={sweep_dir}"]
    started = time.monotonic()
    try:
        done = subprocess.run(
            [sys.executable, "run.py", *args, *extra],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        code, stderr = done.returncode, done.stderr
        stdout = done.stdout
    except subprocess.TimeoutExpired:
        code, stderr, stdout = None, "", ""
    seconds = time.monotonic() - started
    problems = []
    if code != 2:
        problems.append(f"exit status {code}")
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr")
    if case.words.lower() not in stderr.lower():
        problems.append(f"no {case.words!r}")
    if any(marker in stderr for marker in HYDRA_LINES):
        problems.append("Hydra's lines or a traceback")
    if "[rank" in stdout + stderr or any(run_dir.glob("logs/*")) or any(sweep_dir.glob("*/logs/*")):
        problems.append("a worker started")
    named = str(run_dir) in stderr or str(sweep_dir) in stderr
    if not named and (run_dir.exists() or any(sweep_dir.glob("*"))):
        problems.append("a folder left that the sentence does not name")
    if seconds > 60:
        problems.append(f"{seconds:.0f} s")
    return Outcome(case, code, stderr, seconds, tuple(problems))


def main() -> None:
    import os
    import tempfile

    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "MASTER_"))}
    env |= {"CUDA_VISIBLE_DEVICES": "", "PYTHONUNBUFFERED": "1"}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for index, case in enumerate(CASES):
            found = outcome(case, Path(tmp) / str(index), env)
            if found.problems:
                bad += 1
                last = found.stderr.strip().splitlines()[-1:] or [""]
                print(f"FAIL {' '.join(case.args)}: {'; '.join(found.problems)} | {last[0][:200]}")
    print(f"{len(CASES) - bad} of {len(CASES)} bad inputs end as one sentence, exit 2")


if __name__ == "__main__":
    main()
