"""Typed schema of a linkbench job's configuration, with the range checks beside the fields.

Every config group under ``conf/`` has one dataclass here; the groups whose options differ
in their keys, ``task`` and ``strategy``, have one dataclass per option
(:mod:`linkbench.config.tasks`, :mod:`linkbench.config.strategies`) on a base here. The
top-level :class:`Config` is registered in Hydra's ConfigStore as ``linkbench_schema`` and
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
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, ClassVar, Protocol

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from linkbench.config.checks import require, require_not_negative, require_positive
from linkbench.config.targets import import_class
from linkbench.errors import ConfigError
from linkbench.link.emulated import rate_problem
from linkbench.metrics import Metric
from linkbench.metrics import register as register_metrics


class Choice(str, Enum):
    """A config choice; formats as its value (``nccl``, not ``BackendName.nccl``)."""

    def __str__(self) -> str:
        return str(self.value)


class BackendName(Choice):
    auto = "auto"
    nccl = "nccl"
    gloo = "gloo"


class InterconnectName(Choice):
    auto = "auto"
    nvlink = "nvlink"
    pcie = "pcie"
    socket = "socket"
    emulated = "emulated"


class Transport(Choice):
    """The transport family NCCL is expected to pick for an interconnect arm."""

    any = "any"
    P2P = "P2P"
    SHM = "SHM"
    NET = "NET"


class PrecisionName(Choice):
    auto = "auto"  # resolved by the plan, for the machine it plans for
    fp32 = "fp32"
    tf32 = "tf32"
    fp16 = "fp16"
    bf16 = "bf16"


class AutocastDtype(Choice):
    float16 = "float16"
    bfloat16 = "bfloat16"


class ScalingRule(Choice):
    linear = "linear"
    sqrt = "sqrt"
    none = "none"


class ModelInput(Choice):
    image = "image"
    tokens = "tokens"


class DataName(Choice):
    synthetic = "synthetic"
    digits = "digits"
    fake = "fake"
    imagefolder = "imagefolder"
    cifar10 = "cifar10"


class WarmupFrom(Choice):
    zero = "zero"
    base = "base"


class Decay(Choice):
    none = "none"
    step = "step"
    cosine = "cosine"


class TensorDtype(Choice):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class NcclAlgo(Choice):
    """NCCL_ALGO's values (NCCL's env docs); NVLS and NVLSTree are refused (NVLS stays off)."""

    ring = "Ring"
    tree = "Tree"
    collnet_direct = "CollnetDirect"
    collnet_chain = "CollnetChain"
    nvls = "NVLS"
    nvls_tree = "NVLSTree"
    pat = "PAT"


class NcclProto(Choice):
    simple = "Simple"
    ll = "LL"
    ll128 = "LL128"


class ProfileName(Choice):
    none = "none"
    trace = "trace"


class Collective(Choice):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"


# NVML updates utilisation and PCIe throughput over windows of 20 ms and more.
MAX_SAMPLE_HZ = 50.0
# A job's training steps when neither steps, epochs nor samples says.
DEFAULT_STEPS = 100
# Steps not timed when untimed_steps is null, in a run of 20 steps or more.
DEFAULT_UNTIMED_STEPS = 10
# torch.compile's modes (torch.compile's docstring); hyphens rule out an enum.
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int8")
# Steps in which torch.compile compiles (and reduce-overhead records its graphs).
COMPILE_STEPS = 3
# Eager DDP steps before a CUDA-graph capture: PyTorch's CUDA semantics notes ask for at
# least 11 ("Usage with DistributedDataParallel"); the capture is the step after them.
CUDA_GRAPH_EAGER_STEPS = 11


@dataclass
class BackendConfig:
    """``backend/``: the torch.distributed backend; ``auto`` picks nccl when GPUs are visible."""

    name: BackendName = BackendName.auto


@dataclass
class InterconnectConfig:
    """``interconnect/``: NCCL variables applied to this job's worker processes only."""

    name: InterconnectName = InterconnectName.auto
    description: str = ""
    expected_transport: Transport = Transport.any
    env: dict[str, str] = field(default_factory=dict)
    rate_gbit_s: float | None = None
    """interconnect=emulated: each rank's link, each direction, in Gbit/s (1e9 bits/s)."""
    delay_ms: float = 0.0
    """interconnect=emulated: one-way delay between two ranks, in ms (netem)."""
    jitter_ms: float = 0.0
    """interconnect=emulated: the delay's random variation, in ms (netem)."""
    nodes: int | None = None
    """interconnect=emulated: the world split into this many nodes of equal size; the ranks
    of a node share its namespace (an unshaped path inside the node) and each node reaches
    the others through its uplink, shaped to ``rate_gbit_s``. null: one node per rank."""

    def __post_init__(self) -> None:
        if self.name != InterconnectName.emulated:
            require(
                self.rate_gbit_s is None and not self.delay_ms and not self.jitter_ms,
                f"interconnect.rate_gbit_s, delay_ms and jitter_ms set a link's speed only with "
                f"interconnect=emulated (this job has interconnect={self.name}); add "
                "interconnect=emulated or remove them.",
            )
            require(
                self.nodes is None,
                f"interconnect.nodes={self.nodes} splits an emulated cluster into nodes, only "
                f"with interconnect=emulated (this job has interconnect={self.name}); add "
                "interconnect=emulated or remove it.",
            )
            return
        require(
            self.nodes is None or self.nodes >= 1,
            f"interconnect.nodes={self.nodes} must be 1 or more (or null: one node per rank); "
            "e.g. interconnect.nodes=2.",
        )
        problem = rate_problem(self.rate_gbit_s)  # above 0, at most a NIC's, probed in 60 s
        require(problem is None, str(problem))
        require_not_negative("interconnect.", delay_ms=self.delay_ms, jitter_ms=self.jitter_ms)
        require(
            self.jitter_ms <= self.delay_ms,
            f"interconnect.jitter_ms={self.jitter_ms} varies the delay, so it must not exceed "
            f"interconnect.delay_ms={self.delay_ms}; lower it or raise the delay.",
        )


@dataclass
class PrecisionConfig:
    """``precision/``: autocast dtype and gradient scaling; ``tf32`` turns on TF32 matmuls."""

    name: PrecisionName = PrecisionName.fp32
    autocast_dtype: AutocastDtype | None = None
    grad_scaler: bool = False


@dataclass
class ScalingConfig:
    """``scaling/``: how the learning rate follows the global batch, and its warmup."""

    rule: ScalingRule = ScalingRule.linear
    reference_batch: int = 256
    """base_lr is the learning rate at this global batch."""
    lr_warmup_steps: int = 0
    """Optimizer steps of linear warmup to the scaled learning rate."""
    lr_warmup_epochs: float = 0.0
    """The warmup in epochs of the data (Goyal et al.: 5); data with a size only."""
    warmup_from: WarmupFrom = WarmupFrom.zero
    """zero: ramp from 0; base: Goyal et al.'s gradual warmup from the unscaled base_lr."""
    decay: Decay = Decay.none
    """After the warmup: none, step (x decay_factor at each of decay_at), cosine (to 0)."""
    decay_at: list[float] = field(default_factory=lambda: [0.5, 0.75])
    """decay=step: where the steps fall, as fractions of the run."""
    decay_factor: float = 0.1

    def __post_init__(self) -> None:
        require_positive("scaling.", reference_batch=self.reference_batch)
        require_not_negative(
            "scaling.", lr_warmup_steps=self.lr_warmup_steps, lr_warmup_epochs=self.lr_warmup_epochs
        )
        require(
            all(0 < at < 1 for at in self.decay_at),
            f"scaling.decay_at={list(self.decay_at)} must be fractions of the run between 0 and 1.",
        )
        require(
            0 < self.decay_factor < 1,
            f"scaling.decay_factor={self.decay_factor} must be between 0 and 1, e.g. 0.1.",
        )


@dataclass
class ModelConfig:
    """``model/``: a network built as ``_target_(**kwargs)`` (``hydra.utils.instantiate``).

    The input fields say what the model eats, so linkbench can make its batches and count
    its FLOPs: images of ``in_channels`` x ``image_size``² with labels below ``num_classes``,
    or ``seq_len`` token ids below ``vocab_size`` (next-token targets). ``loss`` is the
    dotted path of a function ``loss(outputs, targets) -> scalar``."""

    name: str = "tiny"
    _target_: str = MISSING
    arch: str | None = None
    """model=torchvision: the torchvision model's name (e.g. efficientnet_b0)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    input: ModelInput = ModelInput.image
    num_classes: int = 10
    image_size: int = 32
    in_channels: int = 3
    image_size_multiple: int = 1
    """The input side must be a multiple of this (16 for ViT-B/16's patches)."""
    vocab_size: int = 8192
    seq_len: int = 256
    loss: str = "linkbench.parts.models.cross_entropy"
    base_lr: float = 0.1
    """The learning rate at scaling.reference_batch (the top-level base_lr follows it)."""
    weight_decay: float = 0.0
    channels_last: bool = False
    """NHWC memory format on GPU for convolutional models (ignored on CPU)."""

    def __post_init__(self) -> None:
        require(bool(self._target_), "model._target_ is empty; name the model's class.")
        require_not_negative("model.", weight_decay=self.weight_decay)
        require_positive("model.", image_size_multiple=self.image_size_multiple)
        if self.input == ModelInput.tokens:
            require_positive("model.", vocab_size=self.vocab_size, seq_len=self.seq_len)
        else:
            require_positive(
                "model.",
                num_classes=self.num_classes,
                image_size=self.image_size,
                in_channels=self.in_channels,
            )


@dataclass
class OptimizerConfig:
    """``optimizer/``: ``_target_(params, lr=..., weight_decay=..., **kwargs)``, a
    torch.optim class; fused or capturable kernels are chosen by linkbench where the class
    has them and they are safe."""

    name: str = "sgd"
    _target_: str = "torch.optim.SGD"
    kwargs: dict[str, Any] = field(default_factory=dict)
    recommended_scaling: ScalingRule | None = None
    """The learning-rate rule that fits this optimizer; another one gets a warning."""


@dataclass
class DataConfig:
    """``data/``: where the batches come from."""

    name: DataName = DataName.synthetic
    root: str | None = None
    download: bool = False
    image_size: int = 32
    num_classes: int = 10
    size: int = 10_000
    num_workers: int = 2
    eval_size: int = 1_000
    """synthetic, fake: samples in the held-out set."""
    eval_fraction: float = 0.2
    """digits, imagefolder without val/: the share held out (a fixed, seeded split)."""

    def __post_init__(self) -> None:
        require(
            self.image_size > 0,
            f"data.image_size={self.image_size} must be positive (it follows model.image_size "
            "unless set).",
        )
        require(
            self.num_classes > 0,
            f"data.num_classes={self.num_classes} must be positive (it follows "
            "model.num_classes unless set).",
        )
        require_positive("data.", size=self.size, eval_size=self.eval_size)
        require_not_negative("data.", num_workers=self.num_workers)
        require(
            0 < self.eval_fraction < 1,
            f"data.eval_fraction={self.eval_fraction} must be between 0 and 1, e.g. 0.2.",
        )


@dataclass
class DDPConfig:
    """``ddp/``: DistributedDataParallel's knobs."""

    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    find_unused_parameters: bool = False

    def __post_init__(self) -> None:
        require_positive("ddp.", bucket_cap_mb=self.bucket_cap_mb)


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

    captures_cuda_graphs: ClassVar[bool] = False
    """Whether its whole step can be captured as one CUDA graph (``cuda_graphs=true``)."""
    scales_gradients: ClassVar[bool] = False
    """Whether it runs under fp16's GradScaler."""
    hooks_buckets: ClassVar[bool] = False
    """Whether it has DDP's gradient buckets: ``comm_hook`` and ``debug.comm_delay_ms``."""
    bf16_hint: ClassVar[str] = ""
    """Its own way out of fp16's GradScaler, for the refusal's sentence."""
    compression_hint: ClassVar[str] = ""
    """Its own way to compress gradients, for the refusal of a DDP comm hook."""

    def spec(self) -> Any:
        """This option, or for a runtime class that no option of the package describes (one
        from outside, or a ``_target_`` overridden), that class, imported here."""
        if self._target_ == own_target(type(self)):
            return self
        return import_class(
            "strategy._target_", self._target_, "linkbench.parts.strategy.Parallel", "comm_bytes"
        )

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
        require(
            claims["hooks_buckets"] or config.comm_hook.hook is None,
            f"comm_hook={config.comm_hook.name} is a DDP communication hook and strategy={s} "
            f"has none; use comm_hook=none{hint[1]}.",
        )


@dataclass
class NcclConfig:
    """``nccl/``: NCCL tuning variables, applied like ``interconnect`` (worker env only),
    recorded, and checked against what NCCL's TUNING log says it ran."""

    name: str = "default"
    algo: NcclAlgo | None = None
    """NCCL_ALGO (ring, tree, collnet_direct, collnet_chain, pat); null: NCCL chooses."""
    proto: NcclProto | None = None
    """NCCL_PROTO (simple, ll, ll128); null: NCCL chooses."""
    min_ctas: int | None = None
    """NCCL_MIN_CTAS: the fewest channels (CTAs) per collective (NCCL 2.17+)."""
    max_ctas: int | None = None
    """NCCL_MAX_CTAS: the most channels per collective (NCCL 2.17+)."""
    buffsize: int | None = None
    """NCCL_BUFFSIZE in bytes (NCCL's default 4 MiB), the Simple protocol's buffer."""
    env: dict[str, str] = field(default_factory=dict)
    """Any other NCCL variable, set the same way."""

    def __post_init__(self) -> None:
        for key in ("min_ctas", "max_ctas", "buffsize"):
            value = getattr(self, key)
            require(value is None or value > 0, f"nccl.{key}={value} must be positive or null.")
        require(
            self.algo not in (NcclAlgo.nvls, NcclAlgo.nvls_tree),
            f"nccl.algo={self.algo.name if self.algo else None} is refused: linkbench keeps NVLink "
            "SHARP (NVLS) off, since its multicast can take a shared host's GPUs out of service; "
            "use nccl.algo=ring or tree.",
        )

    def variables(self) -> dict[str, str]:
        """The NCCL variables this group sets."""
        named = {
            "NCCL_ALGO": self.algo.value if self.algo else None,
            "NCCL_PROTO": self.proto.value if self.proto else None,
            "NCCL_MIN_CTAS": self.min_ctas,
            "NCCL_MAX_CTAS": self.max_ctas,
            "NCCL_BUFFSIZE": self.buffsize,
        }
        return {**{k: str(v) for k, v in named.items() if v is not None}, **self.env}


@dataclass
class CommHookConfig:
    """``comm_hook/``: a DDP communication hook, ``hook`` and its ``state`` built with
    ``hydra.utils.instantiate`` (``hook`` with ``_partial_: true``); none when ``hook`` is null."""

    name: str = "none"
    hook: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    wire_factor: float | None = 1.0
    """Bytes sent per gradient byte (0.5 for 16-bit compression); null when it varies."""
    graph_safe: bool = True
    """The hook does the same work every step, so a CUDA graph can replay it."""

    def __post_init__(self) -> None:
        if self.wire_factor is not None:
            require_positive("comm_hook.", wire_factor=self.wire_factor)


class TaskSpec(Protocol):
    """What the plan, the record and the sweep ask of a task."""

    headline: ClassVar[str]
    metrics: ClassVar[tuple[Metric, ...]]
    trains: ClassVar[bool]

    def check(self, config: Config, device_type: str, notes: list[str]) -> None: ...


def note_untrained(trains: bool, config: Config, notes: list[str]) -> None:
    """The note every task that does not train gets for training-only switches."""
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
        from outside, or a ``_target_`` overridden), that class, imported here; its own
        metrics join this process's table."""
        if self._target_ == own_target(type(self)):
            return self
        cls = import_class("task._target_", self._target_, "linkbench.worker.task.Task", "run")
        require(
            isinstance(getattr(cls, "headline", None), str) and bool(cls.headline),
            f"task._target_={self._target_} names no headline metric; give its class one "
            "(see docs/extending.md).",
        )
        register_metrics(cls.metrics)
        return typing.cast(TaskSpec, cls)

    def check(self, config: Config, device_type: str, notes: list[str]) -> None:
        """Refuse (a ConfigError: one sentence naming the key and the fix) or note what
        this task does with ``config`` on a machine of ``device_type`` ("cuda" or "cpu")."""
        note_untrained(self.trains, config, notes)


def own_target(option: type) -> str:
    """The ``_target_`` an option's dataclass names by default (MISSING for a base)."""
    return next(f.default for f in fields(option) if f.name == "_target_")  # type: ignore[return-value]


@dataclass
class ProfileConfig:
    """``profile/``: torch.profiler traces of a few steps after the timed ones, every rank."""

    name: ProfileName = ProfileName.none
    steps: int = 5
    """Steps recorded (after one unrecorded warm-up step of the profiler)."""
    record_shapes: bool = False
    with_stack: bool = False
    cpu: bool = True
    """Record the host's operators too (the CPU steps need them; on a GPU they cost host
    time per operator, which benchmarks/RESULTS.md measures)."""

    def __post_init__(self) -> None:
        require_positive("profile.", steps=self.steps)


@dataclass
class EvalConfig:
    """``eval``: held-out loss and top-1 accuracy, over every rank's share of the split."""

    enabled: bool = True
    every_steps: int = 0
    """Steps between evaluations (a multiple of log_every); 0: at the end only."""
    batch: int | None = None
    """Per-device batch of the evaluation; null: the training batch."""

    def __post_init__(self) -> None:
        require_not_negative("eval.", every_steps=self.every_steps)
        require(self.batch is None or self.batch > 0, f"eval.batch={self.batch} must be positive.")


@dataclass
class CheckpointConfig:
    """``checkpoint``: periodic, atomic checkpoints in the job directory."""

    every_steps: int = 0
    """Steps between checkpoints (a multiple of log_every); 0 writes none."""


@dataclass
class DebugConfig:
    """``debug``: make a job fail, or slow it by a known amount, on purpose: to test failure
    handling and to calibrate comparisons, here or on a cluster."""

    crash_at_step: int | None = None
    """The step at which ``crash_rank`` raises; null never."""
    crash_rank: int = 0
    step_delay_ms: float = 0.0
    """Every training step of every rank takes this much longer (an injected effect whose
    size is known): a spin kernel on the step's stream on a GPU, a host sleep on CPU."""
    comm_delay_ms: float = 0.0
    """Each gradient bucket's collective waits this long first, on a stream (GPU) or thread
    (CPU) of its own, so the backward pass can hide it: exposed communication with a known
    upper bound (DDP-based strategies)."""
    log_delay_ms: float = 0.0
    """The host sleeps this long in every logging step (a slow file system; never timed)."""

    def __post_init__(self) -> None:
        require_not_negative(
            "debug.",
            step_delay_ms=self.step_delay_ms,
            comm_delay_ms=self.comm_delay_ms,
            log_delay_ms=self.log_delay_ms,
        )


@dataclass
class Config:
    """A whole job. Top-level keys are the ones users sweep most."""

    backend: BackendConfig = field(default_factory=BackendConfig)
    interconnect: InterconnectConfig = field(default_factory=InterconnectConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    """An option of :mod:`linkbench.config.strategies` (conf/config.yaml picks ddp)."""
    nccl: NcclConfig = field(default_factory=NcclConfig)
    comm_hook: CommHookConfig = field(default_factory=CommHookConfig)
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
        if crash.crash_at_step is None:
            return
        require(
            1 <= crash.crash_at_step <= steps,
            f"debug.crash_at_step={crash.crash_at_step} must be a step from 1 to "
            f"steps={steps}, or null.",
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
                d.name == DataName.synthetic,
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
        require(
            self.comm_hook.graph_safe,
            f"cuda_graphs=true replays the step as captured, and comm_hook={self.comm_hook.name} "
            "changes between steps; use comm_hook=none, fp16 or bf16.",
        )
        require(
            not self.ddp.find_unused_parameters,
            "cuda_graphs=true needs the same graph every step; set "
            "ddp.find_unused_parameters=false.",
        )
        require(
            self.untimed_steps > CUDA_GRAPH_EAGER_STEPS,
            f"untimed_steps={self.untimed_steps} would time the {CUDA_GRAPH_EAGER_STEPS} eager "
            "steps and the capture that cuda_graphs=true runs first; set "
            f"untimed_steps>={CUDA_GRAPH_EAGER_STEPS + 1}.",
        )


def options() -> dict[str, dict[str, type]]:
    """The options of the groups whose options are dataclasses of their own: group -> name
    -> the option's dataclass (:mod:`linkbench.config.tasks`, :mod:`.strategies`)."""
    from linkbench.config.strategies import STRATEGIES
    from linkbench.config.tasks import TASKS

    return {"task": TASKS, "strategy": STRATEGIES}


def register_schema() -> None:
    """Store :class:`Config` as ``linkbench_schema`` and every task and strategy under its
    group and name (idempotent; ``hydra/sweeper=rounds`` is stored by the sweeper's plugin,
    which Hydra imports when it looks for plugins)."""
    store = ConfigStore.instance()
    store.store(name="linkbench_schema", node=Config)
    for group, named in options().items():
        for name, option in named.items():
            store.store(group=group, name=name, node=option)


# model=auto and precision=auto, by whether CUDA GPUs are visible: on GPUs a model whose
# gradients make the link matter, on CPU one that trains on two cores in seconds.
AUTO_OPTIONS = {
    False: {"model": "tiny", "precision": "fp32"},
    True: {"model": "resnet50", "precision": "bf16"},
}
AUTO = "auto"
# The checkout this package was installed from (``pip install -e``): run.py and conf/.
_CHECKOUT = Path(__file__).resolve().parents[3]
_auto_nodes: dict[tuple[str, str], DictConfig] = {}  # (group, option): its YAML, by register


def auto_options(cuda_devices: int) -> dict[str, str]:
    """The options ``model=auto`` and ``precision=auto`` stand for on a machine with
    ``cuda_devices`` GPUs."""
    return AUTO_OPTIONS[cuda_devices > 0]


def auto_node(group: str, option: str) -> DictConfig:
    """An option ``auto`` may stand for (or ``auto`` itself), as composing it would give: its
    YAML (registered by :func:`register`) over its group's dataclass."""
    if (group, option) not in _auto_nodes and (_CHECKOUT / "conf").is_dir():
        register(_CHECKOUT)  # a process of a launcher's own (submitit's): run.py did not run
    if (group, option) not in _auto_nodes:
        raise ConfigError(
            f"{group}=auto is chosen by the plan from conf/{group}/, which was not registered; "
            "call linkbench.config.schema.register(project_root) first."
        )
    schema = {"model": ModelConfig, "precision": PrecisionConfig}[group]
    node = OmegaConf.merge(OmegaConf.structured(schema), _auto_nodes[(group, option)])
    assert isinstance(node, DictConfig)
    return node


def register(project_root: Path) -> None:
    """Register the schema; ``model=auto`` and ``precision=auto`` as options named ``auto``
    that :func:`~linkbench.config.plan.make_plan` resolves for the machine it plans for
    (:func:`auto_options`), with the YAML of the options they may stand for; and
    ``${linkbench_root:}`` (the folder holding run.py and experiments/) for
    conf/config.yaml's search path, so +experiment works from any directory."""
    register_schema()
    store = ConfigStore.instance()
    for group in ("model", "precision"):
        _auto_nodes[(group, AUTO)] = OmegaConf.create({"name": AUTO})
        store.store(group=group, name=AUTO, node=_auto_nodes[(group, AUTO)])
        for options in AUTO_OPTIONS.values():
            node = OmegaConf.load(project_root / "conf" / group / f"{options[group]}.yaml")
            assert isinstance(node, DictConfig)
            _auto_nodes[(group, options[group])] = node
    if not OmegaConf.has_resolver("linkbench_root"):
        OmegaConf.register_new_resolver("linkbench_root", lambda: str(project_root))
