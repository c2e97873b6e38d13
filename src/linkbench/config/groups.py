"""One dataclass per config group (``conf/<group>/``), with the range checks beside its
fields. The ``task`` and ``strategy`` groups, whose options differ in their keys, have their
base in :mod:`linkbench.config.schema` and one dataclass per option
(:mod:`linkbench.config.tasks`, :mod:`linkbench.config.strategies`); ``data`` and
``interconnect`` have modules of their own (:mod:`linkbench.config.data`,
:mod:`linkbench.config.links`). The whole job's :class:`~linkbench.config.schema.Config`
holds them all."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from linkbench.config.checks import require, require_not_negative, require_positive
from linkbench.config.choices import (
    AutocastDtype,
    BackendName,
    Decay,
    ModelInput,
    NcclAlgo,
    NcclProto,
    PrecisionName,
    ProfileName,
    ScalingRule,
    WarmupFrom,
)


@dataclass
class BackendConfig:
    """``backend/``: the torch.distributed backend; ``auto`` picks nccl when GPUs are visible."""

    name: BackendName = BackendName.auto


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
class DDPConfig:
    """``ddp/``: the old place of DistributedDataParallel's settings, now the ``ddp`` and
    ``zero1`` strategies' own (``strategy.bucket_cap_mb``, ...). A value set here is moved
    there by the plan, with a note; null: not set."""

    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    find_unused_parameters: bool | None = None

    def __post_init__(self) -> None:
        if self.bucket_cap_mb is not None:
            require_positive("ddp.", bucket_cap_mb=self.bucket_cap_mb)

    def given(self) -> dict[str, Any]:
        """The settings given here: key -> value."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


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
    """``strategy/comm_hook/`` (a setting of the strategies with DDP's gradient buckets,
    ``ddp`` and ``zero1``): a DDP communication hook, ``hook`` and its ``state`` built with
    ``hydra.utils.instantiate`` (``hook`` with ``_partial_: true``); none when ``hook`` is
    null. The top-level ``comm_hook`` group is its old place (the plan moves it)."""

    name: str = "none"
    hook: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    wire_factor: float | None = 1.0
    """Bytes sent per gradient byte (0.5 for 16-bit compression); null when it varies."""
    graph_safe: bool = True
    """The hook does the same work every step, so a CUDA graph can replay it."""

    def __post_init__(self) -> None:
        if self.wire_factor is not None:
            require_positive("strategy.comm_hook.", wire_factor=self.wire_factor)


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

    enabled: bool | None = None
    """null: where the data's labels can be learnt (``data.learnable``), since on random
    labels the held-out accuracy is chance; true or false: as set (the plan resolves it)."""
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
    """The rank that crashes at ``crash_at_step``, or hangs at ``hang_at_step``."""
    hang_at_step: int | None = None
    """The step at which ``crash_rank`` stops its own process (SIGSTOP), as a hung rank
    does: the others' collective times out after ``dist_timeout_s`` and the job names the
    rank that stopped responding; null never."""
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
