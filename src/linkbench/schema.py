"""Typed schema of a linkbench job's configuration.

Every config group under ``conf/`` has one dataclass here; the top-level :class:`Config`
is registered in Hydra's ConfigStore as ``linkbench_schema`` and is the first entry of
``conf/config.yaml``'s defaults list, so every group option is merged into a typed node.
A wrong type, an unknown key or a value outside an enum fails at composition, before any
process starts. Range checks that types cannot express live in :mod:`linkbench.plan`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf


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


class Transport(Choice):
    """The transport family NCCL is expected to pick (see ../shared notes on NCCL log lines)."""

    any = "any"
    P2P = "P2P"
    SHM = "SHM"
    NET = "NET"


class PrecisionName(Choice):
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


class ModelName(Choice):
    tiny = "tiny"
    resnet18 = "resnet18"
    resnet50 = "resnet50"
    vit_b_16 = "vit_b_16"
    gpt = "gpt"


class ModelInput(Choice):
    image = "image"
    tokens = "tokens"


class OptimizerName(Choice):
    sgd = "sgd"
    adamw = "adamw"


class DataName(Choice):
    synthetic = "synthetic"
    fake = "fake"
    imagefolder = "imagefolder"
    cifar10 = "cifar10"


class CommHook(Choice):
    none = "none"
    fp16 = "fp16"
    bf16 = "bf16"
    powersgd = "powersgd"


class TaskName(Choice):
    train = "train"
    allreduce = "allreduce"


class Collective(Choice):
    all_reduce = "all_reduce"
    all_gather = "all_gather"
    reduce_scatter = "reduce_scatter"


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


@dataclass
class PrecisionConfig:
    """``precision/``: autocast dtype, gradient scaling and TF32 matmuls."""

    name: PrecisionName = PrecisionName.fp32
    autocast_dtype: Optional[AutocastDtype] = None
    grad_scaler: bool = False
    allow_tf32: bool = False


@dataclass
class ScalingConfig:
    """``scaling/``: how the learning rate follows the global batch, and its warmup."""

    rule: ScalingRule = ScalingRule.linear
    reference_batch: int = 256
    lr_warmup_steps: int = 0


@dataclass
class ModelConfig:
    """``model/``: one architecture; the gpt fields are read only by ``gpt``."""

    name: ModelName = ModelName.tiny
    input: ModelInput = ModelInput.image
    num_classes: int = 10
    image_size: int = 32
    optimizer: OptimizerName = OptimizerName.sgd
    base_lr: float = 0.1
    weight_decay: float = 0.0
    channels_last: bool = False
    vocab_size: int = 8192
    seq_len: int = 256
    n_layer: int = 4
    n_head: int = 8
    d_model: int = 512


@dataclass
class DataConfig:
    """``data/``: where the batches come from."""

    name: DataName = DataName.synthetic
    root: Optional[str] = None
    download: bool = False
    image_size: int = 32
    num_classes: int = 10
    size: int = 10_000
    num_workers: int = 2


@dataclass
class DDPConfig:
    """``ddp/``: DistributedDataParallel's knobs."""

    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    find_unused_parameters: bool = False
    comm_hook: CommHook = CommHook.none
    powersgd_rank: int = 1


@dataclass
class TaskConfig:
    """``task/``: what a job measures; ``train`` reads no_sync_steps, ``allreduce`` the rest."""

    name: TaskName = TaskName.train
    no_sync_steps: int = 10
    """Steps timed with and without gradient sync after training (0 skips the probe)."""
    ops: list[Collective] = field(default_factory=lambda: [Collective.all_reduce])
    dtype: str = "float32"
    min_bytes: int = 1024
    max_bytes: Optional[int] = None
    """Largest message; null means 1 GiB on GPU and 64 MiB on CPU."""
    size_factor: int = 2
    warmup_iters: int = 5
    iters: int = 20


@dataclass
class CheckpointConfig:
    """``checkpoint``: periodic, atomic checkpoints in the job directory."""

    every_steps: int = 0
    """Steps between checkpoints (a multiple of log_every); 0 writes none."""


@dataclass
class DebugConfig:
    """``debug``: make a job fail on purpose, to test failure handling here or on a cluster."""

    crash_at_step: Optional[int] = None
    """The step at which ``crash_rank`` raises; null never."""
    crash_rank: int = 0


@dataclass
class Config:
    """A whole job. Top-level keys are the ones users sweep most."""

    backend: BackendConfig = field(default_factory=BackendConfig)
    interconnect: InterconnectConfig = field(default_factory=InterconnectConfig)
    precision: PrecisionConfig = field(default_factory=PrecisionConfig)
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    ddp: DDPConfig = field(default_factory=DDPConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    batch: int = 32
    """Per-device batch; the global batch is batch x world size."""
    devices: Optional[int] = None
    """Local ranks; null means every visible GPU, or 2 processes on a machine without one."""
    steps: int = 100
    warmup_steps: int = 10
    """Steps excluded from timing (not the learning-rate warmup, see scaling.lr_warmup_steps)."""
    log_every: int = 10
    seed: int = 0
    base_lr: float = MISSING
    repeats: int = 1
    """Times the job's measurement runs, each in a fresh world of processes; metrics are medians."""
    resume: bool = False
    """Skip this job if it completed before; continue it from its checkpoint if it has one."""
    dist_timeout_s: float = 300.0
    """Process-group timeout: a collective waiting longer on a lost rank fails the job."""
    compile: bool = False
    """Run the DDP model under torch.compile; compilation falls in the untimed warmup steps."""
    compile_mode: str = "default"
    """torch.compile's mode: default, reduce-overhead (CUDA graphs), max-autotune, ..."""
    cuda_graphs: bool = False
    """Capture the whole step (forward, backward, all-reduce, optimizer) as one CUDA graph."""
    cudnn_benchmark: bool = True
    """Let cuDNN time its convolution algorithms in the first step and keep the fastest."""


def register_schema() -> None:
    """Store :class:`Config` as ``linkbench_schema`` (idempotent)."""
    ConfigStore.instance().store(name="linkbench_schema", node=Config)


def register(project_root: Path) -> None:
    """Register the schema, and ``${linkbench_root:}`` (the folder holding run.py and
    experiments/) for conf/config.yaml's search path, so +experiment works from any directory."""
    register_schema()
    if not OmegaConf.has_resolver("linkbench_root"):
        OmegaConf.register_new_resolver("linkbench_root", lambda: str(project_root))
