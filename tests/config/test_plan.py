"""Every config option composes and plans; bad input is refused with one clear sentence."""

from __future__ import annotations

import json
import re

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf
from PIL import Image

from linkbench.config.facts import Facts
from linkbench.config.machine import Machine, OutsideWorld
from linkbench.config.registry import options
from linkbench.config.runtime import PartsFacts
from linkbench.errors import ConfigError
from linkbench.files import describe_file
from linkbench.launcher.planning import plan_job

from ..conftest import CONF

CPU = Machine(cuda_devices=0)
ONE_GPU = Machine(cuda_devices=1)
# A group's YAML files under conf/, and the options stored as dataclasses (task, strategy).
OPTIONS = sorted(
    {(option.parent.relative_to(CONF).as_posix(), option.stem) for option in CONF.rglob("*.yaml")
     if option.parent != CONF}
    | {(group, name) for group, named in options().items() for name in named}
)  # fmt: skip


def extra_overrides(group: str, option: str, tmp_path) -> list[str]:
    if (group, option) == ("data", "imagefolder"):
        (tmp_path / "a_class").mkdir()
        for i in range(4):  # one held out, one training image for each of the 2 ranks
            Image.new("RGB", (4, 4)).save(tmp_path / "a_class" / f"{i}.png")
        return [f"data.root={tmp_path}", "batch=1"]
    if (group, option) == ("model", "custom"):
        return ["model._target_=linkbench.parts.models.TinyCNN", "+model.kwargs.num_classes=10"]
    if (group, option) == ("data", "cifar10"):  # no CIFAR-10 here: rank 0 would fetch it
        return [f"data.root={tmp_path}", "data.download=true"]
    if (group, option) == ("strategy", "hsdp"):  # one node here: replicas given
        return ["strategy.replicas=2"]
    return []


def test_every_group_has_options():
    groups = {g for g, _ in OPTIONS}
    assert groups >= {
        "backend", "interconnect", "precision", "scaling", "model", "optimizer", "data", "ddp",
        "strategy/comm_hook", "comm_hook", "task",
    }  # fmt: skip


@pytest.mark.parametrize(("group", "option"), OPTIONS)
def test_every_option_composes_and_plans(compose_config, tmp_path, group, option):
    cfg = compose_config([f"{group}={option}", *extra_overrides(group, option, tmp_path)])
    node = OmegaConf.select(cfg, group.replace("/", "."))
    if "name" in node and (group, option) not in {("model", "torchvision")}:
        assert str(node.name) == option
    needs_gpu = {("precision", "fp16"), ("backend", "nccl"), ("task", "links")}
    machine = ONE_GPU if (group, option) in needs_gpu else CPU
    plan = plan_job(cfg, str(tmp_path), [], machine)
    assert plan.global_batch == cfg.batch * plan.world_size
    assert plan.lr > 0


def test_default_is_gloo_two_ranks_tiny_synthetic_on_cpu(compose_config, tmp_path):
    plan = plan_job(compose_config(), str(tmp_path), [], CPU)
    assert (plan.backend, plan.device_type, plan.world_size) == ("gloo", "cpu", 2)
    assert plan.config.model.name == "tiny"
    assert plan.config.data.name == "synthetic"


def test_default_uses_nccl_on_every_gpu(compose_config, tmp_path):
    plan = plan_job(compose_config(), str(tmp_path), [], Machine(cuda_devices=8))
    assert (plan.backend, plan.device_type, plan.world_size) == ("nccl", "cuda", 8)
    assert plan.global_batch == 8 * 32


@pytest.mark.parametrize(
    ("rule", "expected"), [("linear", 0.1 * 512 / 256), ("sqrt", 0.1 * 2**0.5), ("none", 0.1)]
)
def test_lr_scales_with_global_batch(compose_config, tmp_path, rule, expected):
    cfg = compose_config([f"scaling={rule}", "batch=64", "base_lr=0.1"])
    plan = plan_job(cfg, str(tmp_path), [], Machine(cuda_devices=8))
    assert plan.lr == pytest.approx(expected)


def test_tf32_on_cpu_falls_back_to_fp32_with_a_note(compose_config, tmp_path):
    plan = plan_job(compose_config(["precision=tf32"]), str(tmp_path), [], CPU)
    assert plan.precision == "fp32"
    assert any("tf32" in note for note in plan.notes)


@pytest.mark.parametrize(
    ("overrides", "machine", "words"),
    [
        (["batch=0"], CPU, "batch=0"),
        (["batch=-3"], CPU, "batch=-3"),
        (["steps=0"], CPU, "steps=0"),
        (["untimed_steps=100", "steps=100"], CPU, "untimed_steps=100"),
        (["devices=0"], CPU, "devices=0"),
        (["devices=2"], ONE_GPU, "devices=2 but only 1 CUDA GPU"),
        (["backend=nccl"], CPU, "backend=nccl needs CUDA GPUs"),
        (["precision=fp16"], CPU, "precision=fp16 needs a CUDA GPU"),
        (["data=imagefolder"], CPU, "data.root is not set"),
        (["data=imagefolder", "data.root=/nonexistent/x"], CPU, "data.root=/nonexistent/x"),
        (["data=cifar10", "data.root=/nonexistent/x"], CPU, "cifar-10-batches-py"),
        (["model=gpt", "data=fake"], CPU, "data=synthetic"),
        (["model=vit_b_16", "data.image_size=100"], CPU, "multiple of 16"),
        (["data=fake", "data.size=10"], CPU, "data.size=10"),
        (["+stesp=3"], CPU, "stesp is not a key of linkbench's config; did you mean steps?"),
        (["model=custom"], CPU, "model._target_ is not set"),
        (["interconnect=pcie", "interconnect.env.NCCL_NVLS_ENABLE=1"], ONE_GPU, "NCCL_NVLS_ENABLE"),
        (["compile_mode=fast"], CPU, "compile_mode=fast is not one of default, reduce-overhead"),
        (["compile=true", "untimed_steps=1"], CPU, "untimed_steps>=3 with compile=true"),
        (["cuda_graphs=true", "untimed_steps=12"], CPU, "cuda_graphs=true needs a CUDA GPU"),
        (["cuda_graphs=true", "compile=true"], ONE_GPU, "use one of them"),
        (["cuda_graphs=true", "precision=fp16"], ONE_GPU, "GradScaler"),
        (["cuda_graphs=true", "strategy/comm_hook=powersgd"], ONE_GPU, "comm_hook=powersgd"),
        (["cuda_graphs=true", "comm_hook=powersgd"], ONE_GPU, "strategy/comm_hook=powersgd"),
        (["cuda_graphs=true", "ddp.find_unused_parameters=true"], ONE_GPU, "find_unused"),
        (["cuda_graphs=true", "untimed_steps=11"], ONE_GPU, "set untimed_steps>=12"),
        (["strategy=fsdp", "cuda_graphs=true", "untimed_steps=12"], ONE_GPU, "strategy=fsdp"),
        (["strategy=zero1", "precision=fp16"], ONE_GPU, "GradScaler is not supported"),
        (["strategy=fsdp", "comm_hook=bf16"], CPU, "strategy.reduce_dtype=bfloat16"),
        (["checkpoint.every_steps=15"], CPU, "multiple of log_every=10"),
        (["checkpoint.every_steps=10", "repeats=2"], CPU, "set repeats=1"),
        (["debug.crash_at_step=0"], CPU, "debug.crash_at_step=0 must be a step from 1"),
        (["debug.crash_at_step=3", "debug.crash_rank=2"], CPU, "debug.crash_rank=2 must be"),
        (["dist_timeout_s=0"], CPU, "dist_timeout_s=0.0 must be positive"),
    ],
)
def test_bad_input_names_the_key(compose_config, tmp_path, overrides, machine, words):
    with pytest.raises(ConfigError) as error:
        plan_job(compose_config(overrides), str(tmp_path), [], machine)
    message = str(error.value)
    assert words in message
    assert "\n" not in message


def test_fast_paths_plan_on_a_gpu(compose_config, tmp_path):
    cfg = compose_config(["cuda_graphs=true", "precision=bf16", "untimed_steps=12"])
    assert plan_job(cfg, str(tmp_path), [], ONE_GPU).config.cuda_graphs is True
    cfg = compose_config(["compile=true", "compile_mode=reduce-overhead"])
    assert plan_job(cfg, str(tmp_path), [], ONE_GPU).config.compile_mode == "reduce-overhead"


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("batch=abc", "batch"),
        ("strategy/comm_hook=zip", "strategy/comm_hook"),
        ("model.n_layers=2", "n_layers"),
    ],
)
def test_wrong_type_or_unknown_key_fails_at_composition(compose_config, override, words):
    with pytest.raises(ConfigCompositionException) as error:
        compose_config([override])
    message = f"{error.value} {error.value.__cause__}"
    assert words in message


def test_unknown_option_lists_the_available_ones(compose_config):
    with pytest.raises(MissingConfigException) as error:
        compose_config(["model=nosuchmodel"])
    assert "model/nosuchmodel" in str(error.value)
    assert "resnet50" in str(error.value)


def test_more_cpu_ranks_than_cores_are_warned_about(compose_config, tmp_path):
    two_cores = Machine(cuda_devices=0, cpu_cores=2)
    plan = plan_job(compose_config(["devices=64"]), str(tmp_path), [], two_cores)
    assert plan.world_size == 64
    assert any("devices=64 CPU ranks share 2 cores" in note for note in plan.notes)
    plan = plan_job(compose_config(["devices=2"]), str(tmp_path), [], two_cores)
    assert not any("cores" in note for note in plan.notes)


def test_the_old_name_of_untimed_steps_still_works_and_says_so(compose_config, tmp_path):
    plan = plan_job(compose_config(["warmup_steps=3"]), str(tmp_path), [], CPU)
    assert plan.config.untimed_steps == 3
    assert any("old name of untimed_steps" in note for note in plan.notes)


def test_the_typed_plan_survives_pickling_for_spawned_workers(compose_config, tmp_path):
    import pickle

    plan = plan_job(compose_config(["model=gpt"]), str(tmp_path), [], CPU)
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan
    assert again.config.model.kwargs["n_layer"] == 4


def test_auto_model_and_precision_follow_the_machine_the_plan_is_given(compose_config, tmp_path):
    """Whatever machine composed the config (before, the one run.py saw at import decided,
    so plan_job(compose(), ..., Machine(cuda_devices=8)) planned tiny and fp32)."""
    cfg = compose_config()
    # On GPUs the default job's gradients (resnet50: 102 MB per step) make the link matter.
    plan = plan_job(cfg, str(tmp_path), [], Machine(cuda_devices=8))
    assert (plan.config.model.name, plan.precision) == ("resnet50", "bf16")
    assert plan.config.model._target_ == "torchvision.models.resnet50"
    assert plan.config.precision.autocast_dtype == "bfloat16"
    assert plan.config.model.kwargs["num_classes"] == plan.config.data.num_classes
    cpu = plan_job(cfg, str(tmp_path), [], CPU)
    assert (cpu.config.model.name, cpu.precision) == ("tiny", "fp32")
    # Keys the user set for model=auto hold for the option it stands for.
    overrides = ["model.channels_last=true", "+model.kwargs.zero_init_residual=true"]
    cfg = compose_config(overrides)
    plan = plan_job(cfg, str(tmp_path), overrides, Machine(cuda_devices=8))
    assert plan.config.model.channels_last is True
    assert plan.config.model.kwargs["zero_init_residual"] is True
    # ... also where the caller composed them but passes no override strings.
    plan = plan_job(compose_config(["model.image_size=64"]), str(tmp_path), [], ONE_GPU)
    assert (plan.config.model.name, plan.config.model.image_size) == ("resnet50", 64)
    # Named options stay what they are on any machine.
    named = plan_job(compose_config(["model=tiny"]), str(tmp_path), [], Machine(cuda_devices=8))
    assert named.config.model.name == "tiny" and named.precision == "bf16"


def test_the_default_job_on_this_cpu_machine_is_the_tiny_cnn(compose_config, tmp_path):
    plan = plan_job(compose_config(), str(tmp_path), [], CPU)
    assert (plan.config.model.name, plan.precision) == ("tiny", "fp32")


def test_the_rules_between_keys_run_once_on_the_finished_numbers(
    compose_config, tmp_path, monkeypatch
):
    """Config.check() holds the cross-group rules and the plan runs it once, after the budget
    made steps a number (before, Config.__post_init__ ran them two or three times per plan,
    on whatever steps the config had then); steps stays null until the plan sets it."""
    from linkbench.config.schema import Config

    calls = []
    original = Config.check
    monkeypatch.setattr(Config, "check", lambda self: calls.append(self.steps) or original(self))
    cfg = compose_config(["data=digits", "epochs=2"])
    assert cfg.steps is None
    plan = plan_job(cfg, str(tmp_path), [], CPU)
    assert calls == [plan.steps] and plan.steps == plan.config.steps > 0
    assert plan_job(compose_config(), str(tmp_path), [], CPU).steps == 100
    # rerun.yaml pins the steps the epochs made, and plans again to the same steps.
    again = plan_job(plan.resolved_config(), str(tmp_path), [], CPU)
    assert again.steps == plan.steps and again.config.epochs is None


def test_a_budget_and_steps_both_set_are_refused_wherever_steps_was_set(compose_config, tmp_path):
    """Read from the config, not from the override strings: an experiment's steps counts
    too (gpt_comm sets steps: 100; before, only a command-line steps= was seen)."""
    with pytest.raises(ConfigError, match=r"epochs=2\.0 and steps=50 both set the length"):
        plan_job(compose_config(["data=digits", "epochs=2", "steps=50"]), str(tmp_path), [], CPU)
    with pytest.raises(ConfigError, match="samples=640 and steps=100 both set the length"):
        cfg = compose_config(["+experiment=gpt_comm", "samples=640"])
        plan_job(cfg, str(tmp_path), [], CPU)


def test_the_plan_is_finished_when_make_plan_returns(compose_config, tmp_path):
    """The parts check (handed in: it needs torch), the sweep's compile cache and the resume
    step are set by make_plan; nothing changes the plan afterwards."""
    calls = []

    def parts_check(config, lr):
        calls.append((config.model.name, lr))
        return PartsFacts(1234, 10**6, 10**5)

    cfg = compose_config(["compile=true", "resume=true"])
    plan = plan_job(cfg, str(tmp_path), [], CPU, parts_check, sweep_dir="/sweep")
    assert calls == [("tiny", plan.lr)]
    assert plan.flops_per_sample == 1234
    assert plan.compile_cache_dir == "/sweep/.compile_cache"
    assert plan.resume_step is None  # no checkpoint yet
    # A whole checkpoint is continued from; a damaged one is set aside by rank 0's process.
    saved = tmp_path / "checkpoint" / "step-6"
    saved.mkdir(parents=True)
    (saved / "__0_0.distcp").write_bytes(b"state")
    info = {"step": 6, "dir": "checkpoint/step-6", "world_size": 2,
            "files": {"__0_0.distcp": describe_file(saved / "__0_0.distcp")}}  # fmt: skip
    (tmp_path / "checkpoint.json").write_text(json.dumps(info))
    assert plan_job(compose_config(["resume=true"]), str(tmp_path), [], CPU).resume_step == 6
    (saved / "__0_0.distcp").write_bytes(b"stat")
    other_rank = Machine(0, outside=OutsideWorld(rank=1, world_size=2, local_world_size=2))
    plan = plan_job(compose_config(["resume=true"]), str(tmp_path), [], other_rank)
    assert plan.resume_step is None and saved.is_dir()
    plan = plan_job(compose_config(["resume=true"]), str(tmp_path), [], CPU)
    assert plan.resume_step is None and not saved.exists()
    assert any("step-6 is damaged (__0_0.distcp: 4 bytes" in note for note in plan.notes)
    assert (tmp_path / "checkpoint" / "step-6.damaged" / "__0_0.distcp").read_bytes() == b"stat"
    # Damaged at its size: the hash says so.
    saved.mkdir()
    (saved / "__0_0.distcp").write_bytes(b"state")
    (tmp_path / "checkpoint.json").write_text(json.dumps(info))
    (saved / "__0_0.distcp").write_bytes(b"stare")
    plan = plan_job(compose_config(["resume=true"]), str(tmp_path), [], CPU)
    said = "__0_0.distcp: its 5 bytes as checkpoint.json recorded, but their SHA-256 is not"
    assert plan.resume_step is None and any(said in note for note in plan.notes), plan.notes
    # A checkpoint.json of before checkpoints by DCP (one checkpoint.pt) is said, not read.
    (tmp_path / "checkpoint.json").write_text(json.dumps({"step": 4, "bytes": 9, "sha256": "x"}))
    plan = plan_job(compose_config(["resume=true"]), str(tmp_path), [], CPU)
    assert plan.resume_step is None
    assert any("a checkpoint of an older linkbench" in note for note in plan.notes)


def test_a_jobs_overrides_are_parsed_once_and_carried(compose_config, tmp_path, monkeypatch):
    """Hydra's parser reads a job's overrides once; the plan carries the texts it records
    (without resume) and what they set, which the record and the HParams session read."""
    from linkbench.config import overrides as module

    texts = ["resume=true", "batch=8", "model=auto", "model.weight_decay=0.5"]
    given = module.JobOverrides.of(texts)
    assert given.texts == ("batch=8", "model=auto", "model.weight_decay=0.5")
    assert given.settings == {"batch": 8, "model": "auto", "model.weight_decay": 0.5}
    monkeypatch.setattr(module, "parse", lambda _: pytest.fail("parsed a second time"))
    cfg = compose_config(["batch=8", "model=auto", "model.weight_decay=0.5"])
    plan = plan_job(cfg, str(tmp_path), given, CPU)
    assert plan.overrides == ["batch=8", "model=auto", "model.weight_decay=0.5"]
    assert plan.settings == given.settings
    assert plan.config.model.name == "tiny" and plan.config.model.weight_decay == 0.5


def test_a_batch_that_cannot_fit_is_warned_of_before_any_worker(compose_config, tmp_path):
    """The estimate from the model built on the meta device, against a rank's share of the
    host's memory after what the launcher and each rank hold to start: batch=50000 of the
    tiny CNN on 2 ranks is over 12 GB a rank (warned); batch=300000 is more than the whole
    host (refused: not even one rank would fit)."""
    from linkbench.launcher.parts_check import check_parts

    host = Machine(cuda_devices=0, memory_bytes=24 * 10**9)
    big = plan_job(compose_config(["batch=50000"]), str(tmp_path), [], host, check_parts)
    note = next(n for n in big.notes if n.startswith("batch=50000 with model=tiny"))
    assert "more than the 11.7 GB a rank has here (2 ranks share 24.0 GB" in note
    fits = int(note.split("about ")[1].split(" ")[0])
    assert 10_000 < fits < 50_000
    small = plan_job(compose_config([f"batch={fits // 2}"]), str(tmp_path), [], host, check_parts)
    assert not [n for n in small.notes if "rough estimate" in n]
    with pytest.raises(ConfigError, match="not even one rank would fit; lower batch"):
        plan_job(compose_config(["batch=300000"]), str(tmp_path), [], host, check_parts)
    unknown = plan_job(compose_config(["batch=300000"]), str(tmp_path), [], CPU, check_parts)
    assert not [n for n in unknown.notes if "rough estimate" in n], "no figure, no warning"


@pytest.mark.parametrize(("steps", "untimed"), [(10, 5), (4, 2), (100, 10), (None, 10)])
def test_untimed_steps_follow_a_short_run(compose_config, tmp_path, steps, untimed):
    """Before: steps=10, the obvious tiny job, was refused (untimed_steps defaulted to 10)."""
    given = [f"steps={steps}"] if steps else []
    plan = plan_job(compose_config(given), str(tmp_path), given, CPU)
    assert plan.untimed_steps == untimed
    graphs = plan_job(compose_config(["steps=40", "compile=true"]), str(tmp_path), [], CPU)
    assert graphs.untimed_steps == 10


def test_a_checkpoint_record_cut_short_is_said_and_set_aside(tmp_path):
    """Before: a truncated checkpoint.json made a resumed job start over without a word."""
    from linkbench.files import CheckpointFound, find_checkpoint, set_aside

    (tmp_path / "checkpoint.json").write_text('{"step": 20, "dir": "checkpoint/st')
    found = find_checkpoint(tmp_path)
    assert found.step is None and found.problem is not None
    assert "checkpoint.json cannot be read (cut short, or not JSON)" in found.problem
    assert "the job starts over from step 0" in found.problem
    assert (tmp_path / "checkpoint.json").exists(), "finding reads, and changes nothing"
    set_aside(found)
    assert (tmp_path / "checkpoint.json.damaged").exists()
    assert find_checkpoint(tmp_path) == CheckpointFound(), "said once"


@pytest.mark.parametrize(
    ("override", "words"),
    [
        ("interconnect.expected_transport=P2P", "interconnect.expected_transport=P2P contradicts"),
        ("interconnect.env.NCCL_P2P_DISABLE=0", "interconnect.env.NCCL_P2P_DISABLE=0 lets NCCL "
         "leave the emulated link (the arm sets NCCL_P2P_DISABLE=1)"),
        ("interconnect.env.NCCL_NET=IB", "interconnect.env.NCCL_NET=IB lets NCCL leave"),
    ],
)  # fmt: skip
def test_an_override_that_takes_the_emulated_arm_off_its_link_is_refused(
    compose_config, tmp_path, override, words
):
    """Before: accepted without a word, and the transport check then "verified" a run whose
    NCCL traffic could bypass the link."""
    cfg = compose_config(["interconnect=emulated", override])
    with pytest.raises(ConfigError, match=re.escape(words)):
        plan_job(cfg, str(tmp_path), [override], CPU)


def test_a_rerun_yaml_from_before_each_data_option_had_its_own_keys_still_plans(
    compose_config, tmp_path
):
    """A rerun.yaml written when every data option shared one schema carries all its keys
    (data.root, data.size, ... for data=digits): the ones digits lacks did nothing and are
    dropped; a key no data option ever had is still refused."""
    plan = plan_job(compose_config(["data=digits", "epochs=1"]), str(tmp_path), [], CPU)
    old = plan.resolved_config()
    old["data"].update(root=None, download=False, size=10_000, eval_size=1_000)
    again = plan_job(old, str(tmp_path), [], CPU)
    assert again.steps == plan.steps and again.config.data == plan.config.data
    old["data"]["colour"] = "red"
    with pytest.raises(ConfigError, match=r"^data\.colour is not a key of linkbench's config"):
        plan_job(old, str(tmp_path), [], CPU)


def test_ddps_settings_are_the_ddp_strategys_and_the_old_keys_are_moved_with_a_note(
    compose_config, tmp_path
):
    """DDP's settings belong to strategy=ddp (and zero1): strategy=fsdp has no
    strategy.bucket_cap_mb to write. The old ddp.* keys still work where the strategy has
    them, with a note, and are refused where it has none."""
    plan = plan_job(compose_config(["strategy.bucket_cap_mb=50"]), str(tmp_path), [], CPU)
    assert plan.config.strategy.bucket_cap_mb == 50 and not plan.notes
    old = plan_job(
        compose_config(["strategy=zero1", "ddp.bucket_cap_mb=50", "ddp.static_graph=true"]),
        str(tmp_path),
        [],
        CPU,
    )
    assert (old.config.strategy.bucket_cap_mb, old.config.strategy.static_graph) == (50, True)
    assert old.config.ddp.given() == {}  # moved, not applied twice
    assert (
        "ddp.bucket_cap_mb, ddp.static_graph is the old place of strategy=zero1's settings; "
        "write strategy.bucket_cap_mb=50.0 strategy.static_graph=true."
    ) in old.notes
    again = plan_job(old.resolved_config(), str(tmp_path), [], CPU)  # its rerun.yaml
    assert again.config.strategy == old.config.strategy and not again.notes
    refusal = r"^ddp\.bucket_cap_mb=50\.0 sets DistributedDataParallel, which strategy=fsdp"
    with pytest.raises(ConfigError, match=refusal):
        plan_job(compose_config(["strategy=fsdp", "ddp.bucket_cap_mb=50"]), "x", [], CPU)


def test_ddps_communication_hook_is_a_group_of_the_strategies_that_have_it(
    compose_config, tmp_path
):
    """strategy/comm_hook belongs to strategy=ddp and zero1 (strategy=fsdp has none to
    choose). The old comm_hook=... still works where the strategy has a hook, with a note,
    is refused where it has none, and comm_hook=none (an old rerun.yaml's) is dropped."""
    plan = plan_job(compose_config(["strategy/comm_hook=bf16"]), str(tmp_path), [], CPU)
    assert plan.config.strategy.comm_hook.name == "bf16" and not plan.notes
    old = plan_job(
        compose_config(
            ["strategy=zero1", "comm_hook=powersgd", "comm_hook.state.start_powerSGD_iter=5"]
        ),
        str(tmp_path),
        [],
        CPU,
    )
    hook = old.config.strategy.comm_hook
    assert (hook.name, hook.state["start_powerSGD_iter"]) == ("powersgd", 5)
    assert old.config.comm_hook is None  # moved, not applied twice
    assert (
        "comm_hook=powersgd is the old place of DDP's communication hook; write "
        "strategy/comm_hook=powersgd."
    ) in old.notes
    again = plan_job(old.resolved_config(), str(tmp_path), [], CPU)  # its rerun.yaml
    assert again.config.strategy == old.config.strategy and not again.notes
    with pytest.raises(
        ConfigError,
        match=r"^comm_hook=bf16 is a DDP communication hook and "
        r"strategy=fsdp has none; drop comm_hook=bf16, or strategy.reduce_dtype",
    ):
        plan_job(compose_config(["strategy=fsdp", "comm_hook=bf16"]), "x", [], CPU)
    both = ["comm_hook=powersgd", "strategy/comm_hook=bf16"]
    with pytest.raises(ConfigError, match=r"^comm_hook=powersgd and strategy/comm_hook=bf16 both"):
        plan_job(compose_config(both), "x", [], CPU)
    none = plan_job(compose_config(["strategy=fsdp", "comm_hook=none"]), str(tmp_path), [], CPU)
    assert none.config.comm_hook is None and not none.notes


_TOUCHES_DISK = (
    "open", "os.listdir", "os.scandir", "os.rename", "os.remove", "os.rmdir", "os.mkdir",
    "shutil.rmtree", "subprocess.Popen", "os.exec", "os.posix_spawn",
)  # fmt: skip
_seen: list[str] | None = None


def _audit(event: str, args: tuple) -> None:
    if _seen is not None and event.startswith(_TOUCHES_DISK):
        _seen.append(f"{event}{args[:1]}")


def test_planning_decides_from_the_facts_and_touches_no_file(compose_config, tmp_path):
    """make_plan reads, lists, moves and runs nothing (an audit hook sees every open, listing,
    rename, removal and process start): the launcher gathered what it decides from, an image
    folder's classes and size and a damaged checkpoint among them, and sets the checkpoint
    aside only after the plan is made. Before: make_plan walked the folder, hashed the
    checkpoint, moved it aside and made a network namespace to see whether it could."""
    import sys

    from linkbench.config.overrides import JobOverrides
    from linkbench.config.plan import job_config, make_plan
    from linkbench.launcher.parts_check import check_parts
    from linkbench.launcher.planning import gather_facts
    from linkbench.worker.runtime import runtime_of

    global _seen
    root = tmp_path / "images"
    for name in ("cat", "dog"):
        (root / name).mkdir(parents=True)
        for i in range(30):
            Image.new("RGB", (4, 4)).save(root / name / f"{i}.png")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "checkpoint.json").write_text('{"step": 20, "dir": "checkpoint/st')
    texts = ["data=imagefolder", f"data.root={root}", "resume=true", "epochs=2", "batch=4"]
    given = JobOverrides.of(texts)
    config = job_config(compose_config(texts), given, CPU)
    facts = gather_facts(config, job_dir, CPU)
    assert facts.data.classes == 2 and facts.checkpoint.damaged is not None
    # The launcher's own path: the parts built and checked, the runtime classes resolved.
    real = {"parts_check": check_parts, "runtime_of": runtime_of}
    make_plan(config, str(job_dir), given, facts, **real)  # the imports it makes, made
    sys.addaudithook(_audit)
    _seen = []
    try:
        plan = make_plan(config, str(job_dir), given, facts, **real)
    finally:
        seen, _seen = _seen, None
    assert seen == []
    assert plan.config.data.num_classes == 2 and plan.flops_per_sample  # the parts were built
    assert plan.runtime is not None
    assert plan.steps == 2 * (48 // (2 * 4))  # 60 images, 12 held out, 2 ranks of batch 4
    assert any("checkpoint.json cannot be read" in note for note in plan.notes)
    assert (job_dir / "checkpoint.json").exists() and plan.resume_step is None
    # What the launcher found this host cannot do is refused in its sentence, not tried.
    texts = ["interconnect=emulated", "interconnect.rate_gbit_s=1"]
    given = JobOverrides.of(texts)
    config = job_config(compose_config(texts), given, CPU)
    facts = Facts(CPU, link_problem="interconnect=emulated could not make a namespace.")
    with pytest.raises(ConfigError, match="could not make a namespace"):
        make_plan(config, str(job_dir), given, facts)


@pytest.mark.parametrize("interconnect", ["pcie", "emulated"])
def test_a_rerun_yaml_of_the_shared_keys_layout_still_plans(compose_config, tmp_path, interconnect):
    """Before each data and interconnect option had its own keys, every rerun.yaml carried
    them all (data.root: null for data=digits, interconnect.rate_gbit_s: null for pcie), where
    they did nothing: such a file plans as it did, those keys dropped; the option's own kept."""
    plan = plan_job(
        compose_config(["data=digits", f"interconnect={interconnect}"]), str(tmp_path), [], CPU
    )
    old = plan.resolved_config()
    old["data"] |= {"root": None, "download": False, "size": 10_000, "eval_size": 1_000}
    old["interconnect"] = {
        "rate_gbit_s": None, "delay_ms": 0.0, "jitter_ms": 0.0, "nodes": None,
        **old["interconnect"],
    }  # fmt: skip
    again = plan_job(old, str(tmp_path), [], CPU)
    assert again.config.data == plan.config.data
    assert again.config.interconnect == plan.config.interconnect
    with pytest.raises(ConfigError, match=r"interconnect\.mtu is not a key"):
        plan_job({**old, "interconnect": {**old["interconnect"], "mtu": 9000}}, "x", [], CPU)


def test_each_run_has_a_plan_of_its_own(compose_config, tmp_path):
    """The job's plan holds what every run shares; what belongs to one run (its repeat, its
    emulated link, its log directory) is the run's plan, made from it."""
    import dataclasses

    from linkbench.config.plan import JobPlan, RunPlan
    from linkbench.link.emulated import LinkSpec

    plan = plan_job(compose_config(), str(tmp_path), [], CPU)
    assert type(plan) is JobPlan
    assert not {"repeat", "link"} & {f.name for f in dataclasses.fields(JobPlan)}
    first, third = plan.run(), plan.run(2)
    assert isinstance(third, RunPlan) and third.config is plan.config and third.repeat == 2
    assert first.log_dir == tmp_path / "logs" and third.log_dir == tmp_path / "logs" / "repeat2"
    linked = dataclasses.replace(third, link=LinkSpec("0123abcd", 1.0, 0.0, 0.0, 2))
    assert linked.link is not None and third.link is None and plan.run(2) == third


@pytest.mark.parametrize(
    ("interconnect", "noted"),
    [("pcie", True), ("socket", True), ("nvlink", True), ("auto", False), ("emulated", False)],
)
def test_an_arm_of_nccl_variables_on_gloo_is_noted_and_an_arm_of_its_own_link_is_not(
    compose_config, tmp_path, interconnect, noted
):
    """An option that only sets NCCL's variables changes nothing on gloo; auto sets none,
    and the emulated arm's link is its own, whatever its name."""
    plan = plan_job(compose_config([f"interconnect={interconnect}"]), str(tmp_path), [], CPU)
    said = f"interconnect={interconnect} sets NCCL variables, which have no effect on backend=gloo."
    assert (said in plan.notes) is noted, plan.notes
