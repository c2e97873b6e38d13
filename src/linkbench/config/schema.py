"""Typed schema of a linkbench job's configuration: the whole job (:class:`Config`) and its
registration in Hydra's ConfigStore.

Every config group under ``conf/`` has one dataclass (:mod:`linkbench.config.groups`, its
enums in :mod:`linkbench.config.choices`); the groups whose options differ in their keys,
``task`` and ``strategy``, have one dataclass per option (:mod:`linkbench.config.tasks`,
:mod:`linkbench.config.strategies`) on a base there, and ``data`` and ``interconnect`` have
their options in modules of their own (:mod:`linkbench.config.data`,
:mod:`linkbench.config.links`). The top-level :class:`Config` is
registered in Hydra's ConfigStore as ``linkbench_schema`` and
is the first entry of ``conf/config.yaml``'s defaults list, so every group option is merged
into a typed node.
A wrong type, an unknown key or a value outside an enum fails at composition. Ranges and
combinations inside the config are checked by each dataclass's ``__post_init__``, which runs
when :func:`linkbench.config.plan.make_plan` turns the composed config into these objects
(``OmegaConf.to_object``), before any worker starts. Checks that need the machine (how many
GPUs, which cores, which files) are the plan's.

Objects a user may replace without editing linkbench (the model, the optimizer, DDP's
communication hook) are named by Hydra's ``_target_`` and built with ``hydra.utils``.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol

from omegaconf import MISSING

from linkbench.config.checks import require
from linkbench.config.choices import (
    COMPILE_MODES,
    COMPILE_STEPS,
    CUDA_GRAPH_EAGER_STEPS,
    DEFAULT_UNTIMED_STEPS,
    MAX_SAMPLE_HZ,
    ModelInput,
)
from linkbench.config.data import DataConfig
from linkbench.config.groups import (
    BackendConfig,
    CheckpointConfig,
    CommHookConfig,
    DDPConfig,
    DebugConfig,
    EvalConfig,
    ModelConfig,
    NcclConfig,
    OptimizerConfig,
    PrecisionConfig,
    ProfileConfig,
    ScalingConfig,
)
from linkbench.config.links import LinkConfig
from linkbench.config.targets import import_class
from linkbench.metrics import Metric

# What a strategy may claim it can run (class attributes of its option, or of an outside
# strategy's runtime class); a claim it does not make is no.
CAPABILITIES = ("captures_cuda_graphs", "scales_gradients", "hooks_buckets")


@dataclass
class StrategyConfig:
    """``strategy/``: how the model is spread over the ranks. Each built-in strategy is one
    subclass in :mod:`linkbench.config.strategies` (its keys, checks and capabilities, and
    the ``_target_`` of its runtime class in :mod:`linkbench.parts.strategy`, which only the
    workers import), stored in Hydra's ConfigStore under its name. A strategy from outside
    the package composes onto this base: its YAML names its runtime class by ``_target_``,
    which says its capabilities itself (docs/extending.md), and keeps its own keys under
    ``options``."""

    name: str = MISSING
    _target_: str = MISSING
    """The runtime class, a ``linkbench.parts.strategy.Parallel`` subclass."""
    options: dict[str, Any] = field(default_factory=dict)
    """A strategy from outside the package: its own keys."""

    groups: ClassVar[dict[str, str]] = {}
    """Config groups of its own, ``strategy/<group>``, and the option each starts with (the
    registry adds them to its defaults list: ``strategy/comm_hook=bf16``)."""
    captures_cuda_graphs: ClassVar[bool] = False
    """Whether its whole step can be captured as one CUDA graph (``cuda_graphs=true``)."""
    scales_gradients: ClassVar[bool] = False
    """Whether it runs under fp16's GradScaler."""
    hooks_buckets: ClassVar[bool] = False
    """Whether it has DDP's gradient buckets, which ``debug.comm_delay_ms`` delays."""
    bf16_hint: ClassVar[str] = ""
    """Its own way out of fp16's GradScaler, for the refusal's sentence."""
    compression_hint: ClassVar[str] = ""
    """Its own way to compress gradients, for the refusal of a DDP communication hook."""

    def spec(self) -> Any:
        """This option, or for a runtime class that no option of the package describes (one
        from outside, or a ``_target_`` overridden), that class, imported here."""
        if self._target_ == own_target(type(self)):
            return self
        return import_class(
            "strategy._target_", self._target_, "linkbench.parts.strategy.Parallel", "comm_bytes"
        )

    def hook(self) -> CommHookConfig | None:
        """DDP's communication hook (``strategy/comm_hook``); None for a strategy without
        DDP's buckets."""
        return None

    def model_parallel_sizes(self) -> tuple[int, int]:
        """(tensor-parallel, pipeline) ranks one replica of the model takes; the plan divides
        the world by them (:mod:`linkbench.config.layout`). Data-parallel only: (1, 1)."""
        return 1, 1

    def resolve(self, config: Config, nodes: int, data: int) -> StrategyConfig:
        """This option with what it leaves to the job filled in, from the job's ``nodes`` and
        ``data``-parallel ranks (the plan calls it; the option as given by default)."""
        return self

    def check(self, config: Config) -> None:
        """Refuse, in one sentence naming the key and the fix, what this strategy cannot run
        (a ConfigError); runs in the plan, before any worker starts. A capability the
        strategy does not claim is refused."""
        spec, s = self.spec(), self.name
        claims = {k: getattr(spec, k, False) for k in CAPABILITIES}
        hint = getattr(spec, "bf16_hint", ""), getattr(spec, "compression_hint", "")
        require(
            claims["captures_cuda_graphs"] or not config.cuda_graphs,
            f"strategy={s} cannot be captured as one CUDA graph (its collectives and optimizer "
            "change between steps); use strategy=ddp with cuda_graphs=true, or drop cuda_graphs.",
        )
        require(
            claims["scales_gradients"] or not config.precision.grad_scaler,
            f"strategy={s} with precision={config.precision.name}'s GradScaler is not "
            f"supported; use precision=bf16{hint[0]}.",
        )
        delay = config.debug.comm_delay_ms
        require(
            claims["hooks_buckets"] or not delay,
            f"debug.comm_delay_ms={delay} delays DDP's gradient buckets and strategy={s} has "
            "none; use strategy=ddp or zero1, or set debug.comm_delay_ms=0.",
        )
        old = config.comm_hook  # where the plan found no strategy/comm_hook to move it to
        hook = old or self.hook()
        given = f"{'comm_hook' if old else 'strategy/comm_hook'}={hook.name if hook else ''}"
        require(
            claims["hooks_buckets"] or hook is None or hook.hook is None,
            f"{given} is a DDP communication hook and strategy={s} has none; drop "
            f"{given}{hint[1]}.",
        )


class TaskSpec(Protocol):
    """What the plan, the record and the sweep ask of a task."""

    headline: ClassVar[str]
    metrics: ClassVar[tuple[Metric, ...]]
    trains: ClassVar[bool]

    def check(self, config: Config, device_type: str, notes: list[str]) -> None: ...


# What only a job that trains reads: its groups and keys (a key under one of them too). A
# task that does not train refuses them given on the command line, where they would
# otherwise be accepted and do nothing (two arms of a sweep the same job).
TRAINING_ONLY = (
    "model", "optimizer", "data", "scaling", "precision", "strategy", "comm_hook", "ddp",
    "eval", "checkpoint", "batch", "base_lr", "epochs", "samples", "compile", "compile_mode",
    "cuda_graphs", "cudnn_benchmark",
)  # fmt: skip


def training_only(keys: Iterable[str]) -> list[str]:
    """The keys of ``keys`` that only a job that trains reads (:data:`TRAINING_ONLY`)."""
    return [
        k for k in keys if any(k == t or k.startswith((f"{t}.", f"{t}/")) for t in TRAINING_ONLY)
    ]


def note_untrained(trains: bool, config: Config, notes: list[str]) -> None:
    """The note every task that does not train gets for training-only switches (set by an
    experiment or a config file: given on the command line, the plan refuses them)."""
    if not trains and (config.compile or config.cuda_graphs):
        notes.append(f"compile and cuda_graphs apply to task=train, not task={config.task.name}.")


@dataclass
class TaskConfig:
    """``task/``: what a job measures. Each built-in task is one subclass in
    :mod:`linkbench.config.tasks` (its keys, checks, headline and metrics, and the
    ``_target_`` of its runtime class in ``linkbench.worker``, which only the workers
    import), stored in Hydra's ConfigStore under its name. A task from outside the package
    composes onto this base: its YAML names its runtime class by ``_target_``, which says
    its headline, metrics and checks itself (docs/extending.md), and keeps its own keys
    under ``options``."""

    name: str = MISSING
    _target_: str = MISSING
    """The runtime class, a ``linkbench.worker.task.Task`` subclass."""
    options: dict[str, Any] = field(default_factory=dict)
    """A task from outside the package: its own keys."""

    headline: ClassVar[str] = ""
    """The key of ``result.json``'s ``metrics`` a sweep judges the task by."""
    metrics: ClassVar[tuple[Metric, ...]] = ()
    """Table entries for metrics :mod:`linkbench.metrics` does not know yet."""
    trains: ClassVar[bool] = False
    """Whether the job trains a model (data, budget, held-out checks and FLOPs apply)."""

    def spec(self) -> TaskSpec:
        """This option, or for a runtime class that no option of the package describes (one
        from outside, or a ``_target_`` overridden), that class, imported here (its own
        metrics join this process's table as it is defined: linkbench.worker.task.Task)."""
        if self._target_ == own_target(type(self)):
            return self
        cls = import_class("task._target_", self._target_, "linkbench.worker.task.Task", "run")
        require(
            isinstance(getattr(cls, "headline", None), str) and bool(cls.headline),
            f"task._target_={self._target_} names no headline metric; give its class one "
            "(see docs/extending.md).",
        )
        return typing.cast(TaskSpec, cls)

    def check(self, config: Config, device_type: str, notes: list[str]) -> None:
        """Refuse (a ConfigError: one sentence naming the key and the fix) or note what
        this task does with ``config`` on a machine of ``device_type`` ("cuda" or "cpu")."""
        note_untrained(self.trains, config, notes)

    def resolve(self, device_type: str) -> TaskConfig:
        """This option with what it leaves to the machine filled in, for a job on
        ``device_type`` (the plan calls it; the option as given by default)."""
        return self


def own_target(option: type) -> str:
    """The ``_target_`` an option's dataclass names by default (MISSING for a base)."""
    return next(f.default for f in fields(option) if f.name == "_target_")  # type: ignore[return-value]


MAX_SEED = 2**53
"""A job's seed in size: a rank's seed, seed x 1000 + rank (linkbench.parts.data), then fits
the 64-bit integer torch's generators take."""
INT64 = 2**63


def _check_integers(node: Any, prefix: str = "") -> None:
    """Refuse an integer beyond 64 bits anywhere in the config (torch, numpy and the C++
    underneath take none), naming its key, before any rank starts."""
    for each in fields(node):
        value = getattr(node, each.name)
        if hasattr(value, "__dataclass_fields__"):
            _check_integers(value, f"{prefix}{each.name}.")
        elif isinstance(value, int) and not isinstance(value, bool):
            require(
                -INT64 <= value < INT64,
                f"{prefix}{each.name}={value} is beyond a 64-bit integer; give a number "
                "that fits (below 9,223,372,036,854,775,808 in size).",
            )


@dataclass
class Config:
    """A whole job. Top-level keys are the ones users sweep most."""

    backend: BackendConfig = field(default_factory=BackendConfig)
    interconnect: LinkConfig = field(default_factory=LinkConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    """An option of :mod:`linkbench.config.strategies` (conf/config.yaml picks ddp)."""
    nccl: NcclConfig = field(default_factory=NcclConfig)
    comm_hook: CommHookConfig | None = None
    """The old place of ``strategy/comm_hook``: the plan moves a hook set here onto the
    strategy, with a note."""
    task: TaskConfig = field(default_factory=TaskConfig)
    """An option of :mod:`linkbench.config.tasks` (conf/config.yaml picks train)."""
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    batch: int = 32
    """Per-device batch; the global batch is batch x world size."""
    devices: int | None = None
    """Local ranks; null means every visible GPU, or 2 processes on a machine without one."""
    steps: int | None = None
    """Training steps; null: what ``epochs`` or ``samples`` make, else DEFAULT_STEPS. The
    plan sets it (:func:`linkbench.config.plan.make_plan`), so a planned job's is a number."""
    epochs: float | None = None
    """The budget in passes over the training data instead of steps (data with a size)."""
    samples: int | None = None
    """The budget in training samples (over every rank) instead of steps."""
    untimed_steps: int | None = None
    """Steps before the timed ones (start-up, compilation); not the learning-rate warmup.
    null: DEFAULT_UNTIMED_STEPS, or half the steps of a shorter run, and at least what
    ``compile`` or ``cuda_graphs`` need (:meth:`default_untimed_steps`); the plan sets it."""
    warmup_steps: int | None = None
    """Deprecated name of untimed_steps, still accepted."""
    log_every: int = 10
    seed: int = 0
    base_lr: float = MISSING
    repeats: int | str = "auto"
    """Times the measurement runs, each in a fresh world of processes. In a sweep: the number
    of interleaved rounds, or ``auto`` (adaptive rounds until every comparison is decided);
    in a single job: runs back to back (metrics are medians), ``auto`` being one."""
    round: int | None = None
    """Set by linkbench's sweeper: this job is one round of the sweep's ``repeats`` and runs
    its measurement once."""
    resume: bool = False
    """Skip this job if it completed before; continue it from its checkpoint if it has one."""
    dist_timeout_s: float = 300.0
    """Process-group timeout: a collective waiting longer on a lost rank fails the job."""
    compile: bool = False
    """Run the DDP model under torch.compile; compilation falls in the untimed steps."""
    compile_mode: str = "default"
    """torch.compile's mode: default, reduce-overhead (CUDA graphs), max-autotune, ..."""
    cuda_graphs: bool = False
    """Capture the whole step (forward, backward, all-reduce, optimizer) as one CUDA graph."""
    cudnn_benchmark: bool | None = None
    """Let cuDNN time its convolution algorithms in the first step and keep the fastest;
    null (auto): on for runs of CUDNN_BENCHMARK_MIN_STEPS steps or more, long enough to
    repay the seconds it costs (benchmarks/RESULTS.md has the measurement)."""
    nvtx: bool = False
    """NVTX ranges around forward, backward, optimizer and each bucket's all-reduce (for
    Nsight Systems: ``nsys profile -t cuda,nvtx,osrt python run.py ...``)."""
    hw_sample_hz: float = 10.0
    """NVML samples of each GPU per second during the timed steps (0: off)."""

    def __post_init__(self) -> None:
        if self.warmup_steps is not None:
            self.untimed_steps = self.warmup_steps
        require(
            self.batch > 0,
            f"batch={self.batch} must be a positive per-device batch; e.g. batch=32.",
        )
        require(
            self.steps is None or self.steps > 0,
            f"steps={self.steps} must be positive; e.g. steps=100.",
        )
        require(
            self.log_every > 0, f"log_every={self.log_every} must be positive; e.g. log_every=10."
        )
        require(self.base_lr > 0, f"base_lr={self.base_lr} must be positive.")
        require(
            self.repeats == "auto" or (isinstance(self.repeats, int) and self.repeats >= 1),
            f"repeats={self.repeats} must be a number of runs (1 or more) or auto.",
        )
        require(self.round is None or self.round >= 0, f"round={self.round} must be >= 0 or null.")
        require(
            self.dist_timeout_s > 0,
            f"dist_timeout_s={self.dist_timeout_s} must be positive seconds.",
        )
        require(
            0 <= self.hw_sample_hz <= MAX_SAMPLE_HZ,
            f"hw_sample_hz={self.hw_sample_hz} must be from 0 (off) to {MAX_SAMPLE_HZ}; NVML "
            "refreshes its counters every 20 ms or more.",
        )
        require(
            self.devices is None or self.devices > 0,
            f"devices={self.devices} must be positive, or null for every visible GPU.",
        )
        require(
            self.compile_mode in COMPILE_MODES,
            f"compile_mode={self.compile_mode} is not one of {', '.join(COMPILE_MODES)}.",
        )
        require(
            self.epochs is None or self.samples is None,
            f"epochs={self.epochs} and samples={self.samples} both set a budget; keep one.",
        )
        require(self.epochs is None or self.epochs > 0, f"epochs={self.epochs} must be positive.")
        require(
            self.samples is None or self.samples > 0, f"samples={self.samples} must be positive."
        )

    def check(self) -> None:
        """The rules between groups and keys, once, in the plan, on the finished numbers
        (``steps`` set): each field's own range is checked when the config is built."""
        assert self.steps is not None, "the plan sets steps before it checks the config"
        assert self.untimed_steps is not None, "and untimed_steps"
        _check_integers(self)
        require(
            abs(self.seed) < MAX_SEED,
            f"seed={self.seed} is too large: each rank's seed is seed x 1000 + rank, a 64-bit "
            f"number; give a seed below {MAX_SEED:,} in size, e.g. seed=1.",
        )
        require(
            0 <= self.untimed_steps < self.steps,
            f"untimed_steps={self.untimed_steps} must be at least 0 and below "
            f"steps={self.steps}, or no step is timed; lower untimed_steps or raise steps.",
        )
        self._check_checkpoint()
        every = self.eval.every_steps
        require(
            every % self.log_every == 0,
            f"eval.every_steps={every} must be 0 (at the end) or a multiple of "
            f"log_every={self.log_every}, so evaluations fall between timing windows.",
        )
        self._check_debug(self.steps)
        self._check_strategy()

    def default_untimed_steps(self) -> int:
        """``untimed_steps=null``: DEFAULT_UNTIMED_STEPS, at most half of ``steps`` (so
        ``steps=10`` times 5), and at least the steps ``compile`` or ``cuda_graphs`` must
        leave untimed."""
        assert self.steps is not None
        needed = COMPILE_STEPS if self.compile else 0
        if self.cuda_graphs:
            needed = CUDA_GRAPH_EAGER_STEPS + 1
        return max(needed, min(DEFAULT_UNTIMED_STEPS, self.steps // 2))

    @property
    def job_runs(self) -> int:
        """Runs of this job: one for a round of a sweep or ``repeats=auto``, else ``repeats``."""
        if self.round is not None or not isinstance(self.repeats, int):
            return 1
        return self.repeats

    def _check_checkpoint(self) -> None:
        every = self.checkpoint.every_steps
        require(
            every >= 0 and every % self.log_every == 0,
            f"checkpoint.every_steps={every} must be 0 (none) or a multiple of "
            f"log_every={self.log_every}, so checkpoints fall between timing windows.",
        )
        require(
            every == 0 or self.job_runs == 1,
            f"checkpoint.every_steps={every} with repeats={self.repeats}: a checkpoint continues "
            "one run; set repeats=1 or checkpoint.every_steps=0.",
        )

    def _check_debug(self, steps: int) -> None:
        crash = self.debug
        require(crash.crash_rank >= 0, f"debug.crash_rank={crash.crash_rank} must be >= 0.")
        for key, step in (("crash_at_step", crash.crash_at_step),
                          ("hang_at_step", crash.hang_at_step)):  # fmt: skip
            require(
                step is None or 1 <= step <= steps,
                f"debug.{key}={step} must be a step from 1 to steps={steps}, or null.",
            )

    def check_training(self) -> None:
        """The rules of a job that trains (its task's ``trains``), run once, in the plan: the
        model against the data, and the step's execution mode against the rest."""
        self._check_model_and_data()
        self._check_speed()

    def _check_model_and_data(self) -> None:
        m, d = self.model, self.data
        if m.input == ModelInput.tokens:
            require(
                d.on_device,
                f"model={m.name} trains on tokens and data={d.name} holds images; "
                "use data=synthetic.",
            )
            return
        require(
            d.image_size % m.image_size_multiple == 0,
            f"data.image_size={d.image_size} must be a multiple of {m.image_size_multiple} for "
            f"model={m.name}.",
        )

    def _check_strategy(self) -> None:
        """What holds for every strategy; each strategy's own checks run in the plan
        (:meth:`StrategyConfig.check`)."""
        delay = self.debug.comm_delay_ms
        require(
            not (delay and self.cuda_graphs),
            f"debug.comm_delay_ms={delay} delays collectives outside a captured graph; drop "
            "cuda_graphs=true, or set debug.comm_delay_ms=0.",
        )

    def _check_speed(self) -> None:
        assert self.untimed_steps is not None  # set by the plan before its checks
        if self.compile:
            require(
                self.untimed_steps >= COMPILE_STEPS,
                f"untimed_steps={self.untimed_steps} would time torch.compile's compilation; set "
                f"untimed_steps>={COMPILE_STEPS} with compile=true.",
            )
        if not self.cuda_graphs:
            return
        require(
            not self.compile,
            "cuda_graphs=true and compile=true both capture the step; use one of them (compile's "
            "own CUDA graphs: compile=true compile_mode=reduce-overhead).",
        )
        require(
            not self.precision.grad_scaler,
            f"cuda_graphs=true cannot capture precision={self.precision.name}'s GradScaler, "
            "which reads its overflow flag on the host every step; use precision=bf16, tf32 or "
            "fp32.",
        )
        hook = self.strategy.hook()
        require(
            hook is None or hook.graph_safe,
            f"cuda_graphs=true replays the step as captured, and strategy/comm_hook="
            f"{hook.name if hook else ''} changes between steps; use strategy/comm_hook=none, "
            "fp16 or bf16.",
        )
        require(
            self.untimed_steps > CUDA_GRAPH_EAGER_STEPS,
            f"untimed_steps={self.untimed_steps} would time the {CUDA_GRAPH_EAGER_STEPS} eager "
            "steps and the capture that cuda_graphs=true runs first; set "
            f"untimed_steps>={CUDA_GRAPH_EAGER_STEPS + 1}.",
        )
