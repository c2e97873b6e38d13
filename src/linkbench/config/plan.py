"""From a composed config to a checked, resolved job plan, against the facts of the machine
it runs on.

:func:`job_config` turns the composed config into the typed
:class:`~linkbench.config.schema.Config` (whose fields check their own ranges), with ``auto``
choices resolved for the machine. :func:`make_plan` runs in the launching process before any
worker starts and decides from that config and the :class:`~linkbench.config.facts.Facts` the
launcher gathered (:mod:`linkbench.launcher.planning`), reading and writing no file: it
derives the global batch and the scaled learning rate, and turns every combination the
machine cannot run into a :class:`~linkbench.errors.ConfigError` whose one sentence names the
key and the fix. The plan is a picklable value; each run of it (:class:`RunPlan`) is handed to
every worker.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from linkbench.analysis.inert import JobShape
from linkbench.config.checks import require
from linkbench.config.choices import (
    DEFAULT_STEPS,
    BackendName,
    PrecisionName,
    ScalingRule,
    WarmupFrom,
)
from linkbench.config.compose import follow_machine, to_config, typed_to_plain
from linkbench.config.data import DataFound
from linkbench.config.facts import Facts
from linkbench.config.former import OLD_PLACES, moved_settings
from linkbench.config.layout import Layout, fits
from linkbench.config.machine import Machine
from linkbench.config.memory_plan import memory_note
from linkbench.config.overrides import JobOverrides
from linkbench.config.registry import AUTO
from linkbench.config.runtime import PartsCheck, Runtime, RuntimeOf
from linkbench.config.scaling import LrSchedule, scaled_lr
from linkbench.config.schema import Config, TaskSpec, training_only
from linkbench.errors import ConfigError
from linkbench.files import COMPILE_CACHE_DIR, LOG_DIR, CheckpointFound
from linkbench.link.emulated import LinkSpec
from linkbench.link.interconnect import EnvPlan, plan_env

CPU_DEFAULT_DEVICES = 2
# cudnn_benchmark=null turns cuDNN's algorithm timing on for runs this long. Measured on an
# H200 (benchmarks/RESULTS.md, "cuDNN autotuning"): it cost 1-10 s in the first step and gained
# at most 1.5 % of a step (resnet18 at batch 256), which repays itself after about 4,300 steps.
CUDNN_BENCHMARK_MIN_STEPS = 5000


@dataclass(frozen=True)
class JobPlan:
    """Everything a worker needs: the typed config, resolved for this machine (its backend,
    precision and devices are the ones the job runs with), and what was derived from it."""

    config: Config
    overrides: list[str]
    """The job's command-line overrides, as recorded (without ``resume``)."""
    settings: dict[str, Any]
    """What they set, as Hydra parsed them (:class:`linkbench.config.overrides.JobOverrides`)."""
    job_dir: str
    device_type: str
    layout: Layout
    """The world as data-parallel replicas x tensor x pipeline ranks."""
    global_batch: int
    """Samples of one step over every data-parallel replica: ``batch x layout.data``."""
    lr: float
    env: EnvPlan
    notes: list[str]
    plain_config: dict[str, Any]
    """``config`` as plain data, made once by the plan: what TensorBoard shows, the manifest
    records and rerun.yaml (:meth:`resolved_config`) writes."""
    task_spec: TaskSpec
    """What the plan, the record and the sweep read of the task (its headline, metrics, and
    whether it trains): its option, or an outside task's runtime class (:meth:`TaskConfig.spec
    <linkbench.config.schema.TaskConfig.spec>`, resolved once)."""
    resolved_runtime: Runtime | None = None
    """The runtime classes of the task, the strategy and the data (make_plan's ``runtime_of``; None
    for a plan made without one, which nothing can run: :attr:`runtime`)."""
    nnodes: int = 1
    """Nodes of the world (more than 1 only under an outside launcher)."""
    in_place: bool = False
    """This process is a rank an outside launcher started: run as it, launch nothing."""
    schedule: LrSchedule = field(default_factory=LrSchedule)
    """The learning-rate schedule's multiplier, step by step (warmup, decay)."""
    steps_per_epoch: int | None = None
    """Steps of one pass over the training data (data with a size only)."""
    compile_cache_dir: str | None = None
    """compile=true in a sweep: the sweep's shared compile cache (None: torch's per-user
    default)."""
    cudnn_benchmark: bool = True
    """cudnn_benchmark resolved: auto is on when the run is long enough to repay the tuning."""
    flops_per_sample: int | None = None
    """Training FLOPs of one sample (:mod:`linkbench.parts.flops`), counted by the plan's
    ``parts_check`` (None without one)."""
    resume_step: int | None = None
    """With ``resume=true``: the step of the checkpoint the job continues from."""

    @property
    def runtime(self) -> Runtime:
        """The runtime classes the job runs, as the launcher resolved them."""
        if self.resolved_runtime is None:
            raise RuntimeError(
                "this plan was made without runtime classes; pass make_plan runtime_of="
                "linkbench.worker.runtime.runtime_of to run it."
            )
        return self.resolved_runtime

    @property
    def backend(self) -> str:
        return str(self.config.backend.name)

    @property
    def precision(self) -> PrecisionName:
        return self.config.precision.name

    @property
    def nproc_per_node(self) -> int:
        """Worker processes on this node (``config.devices``, resolved)."""
        assert self.config.devices is not None
        return self.config.devices

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def steps(self) -> int:
        """Training steps (``config.steps``, resolved: a number once planned)."""
        assert self.config.steps is not None
        return self.config.steps

    @property
    def untimed_steps(self) -> int:
        """Steps before the timed ones (``config.untimed_steps``, resolved once planned)."""
        assert self.config.untimed_steps is not None
        return self.config.untimed_steps

    def shape(self) -> JobShape:
        """What decides whether a swept setting can act on the job: its ranks, backend and
        emulated link's nodes (:mod:`linkbench.analysis.inert`)."""
        link = self.config.interconnect.link()
        nodes = (link.nodes or self.world_size) if link is not None else None
        return JobShape(self.world_size, self.backend, nodes)

    def run(self, repeat: int = 0) -> RunPlan:
        """The plan of one of the job's runs (its ``repeats``, 0-based)."""
        return RunPlan(
            **{f.name: getattr(self, f.name) for f in dataclasses.fields(JobPlan)}, repeat=repeat
        )

    def resolved_config(self) -> dict[str, Any]:
        """The config as plain data, with this machine's choices pinned (for rerun.yaml):
        the steps too, so the budget that made them (epochs, samples) is not given again."""
        return {
            **self.plain_config, "resume": False, "warmup_steps": None, "epochs": None,
            "samples": None,
        }  # fmt: skip


def _resolve_devices(config: Config, machine: Machine, notes: list[str]) -> tuple[str, str, int]:
    """(backend, device_type, nproc_per_node)."""
    backend = str(config.backend.name)
    gpus = machine.cuda_devices
    if backend == "nccl":
        require(
            gpus > 0,
            "backend=nccl needs CUDA GPUs and none is visible; use backend=gloo or backend=auto.",
        )
    if backend == "auto":
        backend = "nccl" if gpus > 0 else "gloo"
    device_type = "cuda" if gpus > 0 else "cpu"
    devices = config.devices
    if machine.outside is not None:
        started = machine.outside.local_world_size
        require(
            devices is None or devices == started,
            f"devices={devices} but the outside launcher started {started} processes on this "
            "node; leave devices unset under torchrun or SLURM.",
        )
        devices = started
    if devices is None:
        devices = gpus if gpus > 0 else CPU_DEFAULT_DEVICES
    if device_type == "cuda":
        require(
            devices <= gpus,
            f"devices={devices} but only {gpus} CUDA GPU(s) are visible; set devices<={gpus} or "
            "leave devices unset to use them all.",
        )
    elif machine.cpu_cores and devices > machine.cpu_cores:
        notes.append(
            f"devices={devices} CPU ranks share {machine.cpu_cores} cores: each rank gets a "
            "fraction of a core, so times measure the scheduler as much as the training; "
            f"use devices<={machine.cpu_cores}."
        )
    return backend, device_type, devices


def _nodes(machine: Machine, nproc_per_node: int) -> int:
    if machine.outside is None:
        return 1
    world = machine.outside.world_size
    require(
        world % nproc_per_node == 0,
        f"the outside launcher's world of {world} processes does not split into nodes of "
        f"{nproc_per_node}; start the same number of processes on every node.",
    )
    return world // nproc_per_node


def _resolve_precision(config: Config, device_type: str, notes: list[str]) -> PrecisionName:
    name = config.precision.name
    if device_type == "cpu" and name == PrecisionName.fp16:
        raise ConfigError(
            "precision=fp16 needs a CUDA GPU (float16 autocast with a GradScaler); "
            "use precision=bf16 or precision=fp32 on CPU."
        )
    if device_type == "cpu" and name == PrecisionName.tf32:
        notes.append("precision=tf32 runs as fp32 on CPU: TF32 is a GPU tensor-core mode.")
        return PrecisionName.fp32
    return name


def _check_machine(config: Config, world_size: int) -> None:
    """The combinations that depend on the world's size (the task checks the rest)."""
    if config.debug.crash_at_step is not None or config.debug.hang_at_step is not None:
        require(
            config.debug.crash_rank < world_size,
            f"debug.crash_rank={config.debug.crash_rank} must be a rank from 0 to "
            f"{world_size - 1}.",
        )


def _resolve_budget(
    config: Config, size: int | None, replicas: int, notes: list[str]
) -> tuple[Config, int | None]:
    """The config with ``steps`` made from ``epochs`` or ``samples`` when either is set, and
    the steps of one epoch where the data has a size. An epoch is what a DistributedSampler
    dropping the last partial batch gives: each data-parallel replica's share of the data in
    whole batches. ``size``: the training split's samples, where the data has a size."""
    per_epoch = (size // replicas) // config.batch if size is not None else None
    require(
        per_epoch != 0,
        f"data={config.data.name} gives each of {replicas} data-parallel replica(s) "
        f"{(size or 0) // replicas} training samples, fewer than one batch of "
        f"batch={config.batch}; lower batch (at most {(size or 0) // replicas}) or use more data.",
    )
    if config.epochs is None and config.samples is None:
        return config, per_epoch
    budget = f"epochs={config.epochs}" if config.epochs is not None else f"samples={config.samples}"
    require(
        config.steps is None,
        f"{budget} and steps={config.steps} both set the length of the run; keep one.",
    )
    global_batch = config.batch * replicas
    if config.samples is not None:
        steps = math.ceil(config.samples / global_batch)
    else:
        require(
            per_epoch is not None,
            f"{budget} needs data with a size, and data={config.data.name} has none; use steps "
            "or samples, or data=digits, fake, imagefolder or cifar10.",
        )
        assert per_epoch is not None and config.epochs is not None
        steps = math.ceil(config.epochs * per_epoch)
    notes.append(
        f"{budget} at global batch {global_batch} makes {steps} steps ({steps * global_batch:,} "
        "samples" + (f", {per_epoch} steps per epoch)" if per_epoch else ")")
    )
    untimed = None if config.untimed_steps is None else min(config.untimed_steps, steps - 1)
    return dataclasses.replace(config, steps=steps, untimed_steps=untimed), per_epoch


def _resolve_eval(config: Config) -> Config:
    """The config with ``eval.enabled`` decided: left unset, held-out evaluation where the
    data's labels can be learnt and none where they cannot (its accuracy would be chance;
    the job's first line says so). Set on such data, it runs in the configuration's first
    run only (:attr:`RunPlan.describes`), since no verdict reads it."""
    enabled = config.data.learnable if config.eval.enabled is None else config.eval.enabled
    return dataclasses.replace(config, eval=dataclasses.replace(config.eval, enabled=enabled))


def _check_held_out(config: Config, found: DataFound, replicas: int) -> None:
    if not config.eval.enabled:
        return
    size = found.held_out_size
    require(
        size is None or size >= replicas,
        f"the held-out split of data={config.data.name} has {size} samples, fewer than the "
        f"{replicas} data-parallel replicas that share it; raise data.eval_size or "
        "data.eval_fraction, or set eval.enabled=false.",
    )


def _with_class_count(
    config: Config, found: int | None, given: JobOverrides, notes: list[str]
) -> Config:
    """The config with ``data.num_classes`` the data's own count (``found``: an image
    folder's class folders): the one count the model's head, the labels and the FLOP count
    all read."""
    if found is None or found == config.data.num_classes:
        return config
    if "data.num_classes" in given.settings:
        notes.append(
            f"data.num_classes={config.data.num_classes} is not what data.root holds: its "
            f"{found} class folders are the classes; drop data.num_classes."
        )
    return dataclasses.replace(config, data=dataclasses.replace(config.data, num_classes=found))


def _resume_step(config: Config, found: CheckpointFound, notes: list[str]) -> int | None:
    """With ``resume=true``: the step of the job's usable checkpoint; why one cannot be used
    is said (the launcher sets a damaged one aside)."""
    if not config.resume:
        return None
    if found.problem:
        notes.append(f"resume: {found.problem}")
    return found.step


def _layout(config: Config, world_size: int) -> Layout:
    """The world divided by the ranks one replica of the model takes (the strategy says)."""
    tensor, pipeline = config.strategy.model_parallel_sizes()
    require(
        fits(world_size, tensor, pipeline),
        f"strategy={config.strategy.name} takes {tensor} tensor-parallel x {pipeline} pipeline "
        f"ranks per replica of the model, which does not divide the world of {world_size} "
        "ranks; change the strategy's sizes or devices.",
    )
    return Layout(world_size, tensor, pipeline)


def _scaling_notes(config: Config) -> list[str]:
    """A warning when the scaling rule is not the one that fits the optimizer."""
    rule, fits = config.scaling.rule, config.optimizer.recommended_scaling
    if rule == ScalingRule.none or fits is None or rule == fits:
        return []
    return [
        f"scaling={rule} with optimizer={config.optimizer.name}: the rule that fits "
        f"{config.optimizer.name} is {fits} (conf/optimizer/{config.optimizer.name}.yaml "
        "names its source); compare both if that is the question."
    ]


def _schedule(config: Config, steps: int, lr: float, steps_per_epoch: int | None) -> LrSchedule:
    s = config.scaling
    warmup = s.lr_warmup_steps
    if s.lr_warmup_epochs:
        require(
            steps_per_epoch is not None,
            f"scaling.lr_warmup_epochs={s.lr_warmup_epochs} needs data with a size; use "
            "scaling.lr_warmup_steps.",
        )
        assert steps_per_epoch is not None
        warmup = max(1, round(s.lr_warmup_epochs * steps_per_epoch))
    return LrSchedule(
        warmup_steps=warmup,
        start=config.base_lr / lr if s.warmup_from == WarmupFrom.base else 0.0,
        total_steps=steps,
        decay=s.decay,
        decay_at=tuple(s.decay_at),
        decay_factor=s.decay_factor,
    )


def _worker_variables(config: Config) -> dict[str, str]:
    """The interconnect arm's NCCL variables and the nccl group's, which must not disagree."""
    arm, tuning = dict(config.interconnect.env), config.nccl.variables()
    clash = sorted(k for k in set(arm) & set(tuning) if arm[k] != tuning[k])
    require(
        not clash,
        f"interconnect={config.interconnect.name} and nccl={config.nccl.name} both set "
        f"{', '.join(clash)} to different values; set it in one of them.",
    )
    return {**arm, **tuning}


def _given_text(given: JobOverrides, name: str) -> str:
    """The override that set ``name`` as the user typed it (``name`` where none did)."""
    texts = [t for t in given.texts if t.lstrip("+~").split("=", 1)[0] == name]
    return texts[0] if texts else name


def job_config(cfg: DictConfig | Config, given: JobOverrides, machine: Machine) -> Config:
    """The typed config of a composed one, with ``model=auto`` and ``precision=auto``
    resolved for ``machine`` (what the launcher gathers the job's facts for)."""
    if isinstance(cfg, DictConfig):
        cfg = follow_machine(cfg, given, machine)
    config = cfg if isinstance(cfg, Config) else to_config(cfg)
    require(
        AUTO not in (config.model.name, config.precision.name),
        "model=auto and precision=auto are resolved from a composed config (a DictConfig); "
        "pass that to plan_job or job_config, or name the options.",
    )
    return config


def make_plan(
    config: Config,
    job_dir: str,
    given: JobOverrides,
    facts: Facts,
    parts_check: PartsCheck | None = None,
    sweep_dir: str | None = None,
    runtime_of: RuntimeOf | None = None,
) -> JobPlan:
    """Check ``config`` (:func:`job_config`'s) and resolve it, against the ``facts`` the
    launcher found (the machine, the data, the checkpoint), into the finished plan of the job
    in ``job_dir``: with ``parts_check``, its parts built and its FLOPs counted; in a sweep
    (``sweep_dir``), its compile cache the sweep's; with ``resume=true``, the step its
    checkpoint continues from; with ``runtime_of``, the runtime classes of its task, strategy
    and data, which the plan carries to every process. Reads and writes no file. Raises
    ConfigError on bad input."""
    machine = facts.machine
    notes: list[str] = []
    if config.warmup_steps is not None:
        notes.append(
            f"warmup_steps={config.warmup_steps} is the old name of untimed_steps (steps not "
            "timed); write untimed_steps. The learning-rate warmup is scaling.lr_warmup_steps."
        )
        # The alias has done its work: replacing the config must not apply it again.
        config = dataclasses.replace(config, warmup_steps=None)
    backend, device_type, nproc = _resolve_devices(config, machine, notes)
    nnodes = _nodes(machine, nproc)
    precision = _resolve_precision(config, device_type, notes)
    _check_machine(config, nnodes * nproc)
    config = moved_settings(config, notes)
    config.strategy.check(config)  # its own keys, before the layout they make
    layout = _layout(config, nnodes * nproc)
    link = config.interconnect.link()
    nodes = link.nodes if link is not None else nnodes
    strategy = config.strategy.resolve(config, nodes or nnodes, layout.data)
    config = dataclasses.replace(config, strategy=strategy)
    task = config.task.spec()
    unused = [] if task.trains else training_only([*given.settings, *given.values])
    require(
        not unused,
        f"{_given_text(given, unused[0] if unused else '')} applies to a job that trains "
        f"(task=train), and task={config.task.name} trains no model: it would be accepted "
        "and change nothing; remove it, or run task=train.",
    )
    config = dataclasses.replace(config, task=config.task.resolve(device_type))
    runtime = runtime_of(config) if runtime_of is not None else None
    global_batch = config.batch * layout.data
    steps_per_epoch = None
    if task.trains:
        config.data.check(global_batch)
        config = _with_class_count(config, facts.data.classes, given, notes)
        config, steps_per_epoch = _resolve_budget(config, facts.data.train_size, layout.data, notes)
    if config.steps is None:
        config = dataclasses.replace(config, steps=DEFAULT_STEPS)
    if config.untimed_steps is None:
        config = dataclasses.replace(config, untimed_steps=config.default_untimed_steps())
    config.check()
    assert config.steps is not None  # set by the budget, checked by config.check()
    steps = config.steps
    task.check(config, device_type, notes)
    if task.trains:
        config = _resolve_eval(config)
        _check_held_out(config, facts.data, layout.data)
        notes.extend(_scaling_notes(config))
    config.interconnect.check(config, facts, nnodes * nproc)
    if backend == "gloo" and config.interconnect.env and config.interconnect.link() is None:
        notes.append(
            f"interconnect={config.interconnect.name} sets NCCL variables, which have no effect "
            "on backend=gloo."
        )
    if backend == "gloo" and config.nccl.variables():
        notes.append(
            f"nccl={config.nccl.name} sets {', '.join(config.nccl.variables())}: NCCL tuning "
            "does not apply to backend=gloo."
        )
    s = config.scaling
    lr = scaled_lr(config.base_lr, s.rule, global_batch, s.reference_batch)
    parts = parts_check(config, lr) if parts_check is not None and task.trains else None
    if parts is not None and (note := memory_note(parts, config, device_type, nproc, machine)):
        notes.append(note)
    resume_step = _resume_step(config, facts.checkpoint, notes)
    cudnn = config.cudnn_benchmark
    if cudnn is None:
        cudnn = steps >= CUDNN_BENCHMARK_MIN_STEPS
    # One source of truth: the config says what the job runs with.
    config = dataclasses.replace(
        config,
        backend=dataclasses.replace(config.backend, name=BackendName(backend)),
        precision=dataclasses.replace(config.precision, name=precision),
        devices=nproc,
    )
    schedule = _schedule(config, steps, lr, steps_per_epoch)
    plain = {k: v for k, v in typed_to_plain(config).items() if k not in OLD_PLACES}
    # The workers' environment, from what the config asks of NCCL and what this one has.
    variables = _worker_variables(config)
    env = plan_env(variables, machine.environ)
    notes.extend(env.warnings(str(config.interconnect.name)))
    return JobPlan(
        config=config,
        overrides=list(given.texts),
        settings=given.settings,
        job_dir=str(job_dir),
        device_type=device_type,
        layout=layout,
        nnodes=nnodes,
        in_place=machine.outside is not None,
        global_batch=global_batch,
        lr=lr,
        env=env,
        notes=notes,
        plain_config=plain,
        schedule=schedule,
        steps_per_epoch=steps_per_epoch,
        cudnn_benchmark=cudnn,
        flops_per_sample=parts.flops_per_sample if parts is not None else None,
        resume_step=resume_step,
        compile_cache_dir=(
            str(Path(sweep_dir) / COMPILE_CACHE_DIR) if config.compile and sweep_dir else None
        ),
        task_spec=task,
        resolved_runtime=runtime,
    )


@dataclass(frozen=True)
class RunPlan(JobPlan):
    """One run of a planned job, what the workers run: the job's plan, and what belongs to
    this run alone."""

    repeat: int = 0
    """Which of the job's ``repeats`` this is (0-based)."""
    link: LinkSpec | None = None
    """interconnect=emulated: this run's network (the launcher makes one for each run,
    :mod:`linkbench.link.netns`)."""

    @property
    def describes(self) -> bool:
        """Whether this is its configuration's first run (a sweep's round 0, a job's first
        repeat): where what describes a configuration and no verdict reads runs once, not
        once a round: the communication probe, and held-out evaluation of data whose labels
        cannot be learnt."""
        return (self.config.round or 0) == 0 and self.repeat == 0

    @property
    def log_dir(self) -> Path:
        """Per-rank logs: ``<job>/logs``, or ``<job>/logs/repeat<N>`` for later repeats."""
        logs = Path(self.job_dir) / LOG_DIR
        return logs if self.repeat == 0 else logs / f"repeat{self.repeat}"
