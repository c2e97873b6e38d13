"""From a composed config to a checked, resolved job plan.

:func:`make_plan` runs in the launching process before any worker starts. It resolves
``auto`` choices against the machine, derives the global batch and the scaled learning rate,
and turns every impossible combination into a :class:`~linkbench.errors.ConfigError` whose
one sentence names the key and the fix. The plan is a plain, picklable value handed to every
worker.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from linkbench.errors import ConfigError
from linkbench.interconnect import EnvPlan, plan_env
from linkbench.scaling import scaled_lr
from linkbench.schema import Config

CPU_DEFAULT_DEVICES = 2
TENSOR_DTYPES = ("float32", "float16", "bfloat16", "float64", "int32", "int8")
# task.max_bytes=null means this many bytes, by device type.
DEFAULT_MAX_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}
# torch.compile's modes (torch.compile's docstring).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# Eager DDP steps before a CUDA-graph capture: PyTorch's CUDA semantics notes ask for at
# least 11 ("Usage with DistributedDataParallel"); the capture is the step after them.
CUDA_GRAPH_EAGER_STEPS = 11
# Steps in which torch.compile compiles (and reduce-overhead records its graphs).
COMPILE_STEPS = 3


# What torchrun (and submitit's TorchDistributedEnvironment) set in every process it starts.
WORLD_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR")


@dataclass(frozen=True)
class OutsideWorld:
    """The world an outside launcher (torchrun, SLURM) started this process in."""

    rank: int
    world_size: int
    local_world_size: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> OutsideWorld | None:
        if not all(name in environ for name in WORLD_VARIABLES):
            return None
        sizes = (int(environ["WORLD_SIZE"]), int(environ["LOCAL_WORLD_SIZE"]))
        return cls(int(environ["RANK"]), *sizes)


@dataclass(frozen=True)
class Machine:
    """What the launching process can see."""

    cuda_devices: int
    environ: Mapping[str, str] = field(default_factory=dict)
    outside: OutsideWorld | None = None
    """Set when torchrun or SLURM started this process as one rank of a world."""

    @classmethod
    def current(cls) -> Machine:
        import torch

        environ = dict(os.environ)
        outside = OutsideWorld.from_env(environ)
        return cls(torch.cuda.device_count(), environ, outside)


@dataclass(frozen=True)
class JobPlan:
    """Everything a worker needs; ``config`` is the resolved job config as plain data."""

    config: dict[str, Any]
    overrides: list[str]
    job_dir: str
    backend: str
    device_type: str
    nproc_per_node: int
    precision: str
    global_batch: int
    lr: float
    env: EnvPlan
    notes: list[str]
    repeat: int = 0
    """Which of the job's ``repeats`` this plan runs (0-based)."""
    nnodes: int = 1
    """Nodes of the world (more than 1 only under an outside launcher)."""
    in_place: bool = False
    """This process is a rank an outside launcher started: run as it, launch nothing."""
    flops_per_sample: int | None = None
    """Training FLOPs of one sample (:mod:`linkbench.flops`), counted by the launcher."""
    resume_step: int | None = None
    """With ``resume=true``: the step of the checkpoint the job continues from."""

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def log_dir(self) -> Path:
        """Per-rank logs: ``<job>/logs``, or ``<job>/logs/repeat<N>`` for later repeats."""
        logs = Path(self.job_dir) / "logs"
        return logs if self.repeat == 0 else logs / f"repeat{self.repeat}"


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_ranges(cfg: DictConfig) -> None:
    _require(
        cfg.batch > 0, f"batch={cfg.batch} must be a positive per-device batch; e.g. batch=32."
    )
    _require(cfg.steps > 0, f"steps={cfg.steps} must be positive; e.g. steps=100.")
    _require(
        0 <= cfg.warmup_steps < cfg.steps,
        f"warmup_steps={cfg.warmup_steps} must be at least 0 and below steps={cfg.steps}, "
        "or no step is timed; lower warmup_steps or raise steps.",
    )
    _require(cfg.log_every > 0, f"log_every={cfg.log_every} must be positive; e.g. log_every=10.")
    _require(cfg.base_lr > 0, f"base_lr={cfg.base_lr} must be positive.")
    _require(cfg.repeats >= 1, f"repeats={cfg.repeats} must be at least 1.")
    s = cfg.scaling
    _require(
        s.reference_batch > 0, f"scaling.reference_batch={s.reference_batch} must be positive."
    )
    _require(s.lr_warmup_steps >= 0, f"scaling.lr_warmup_steps={s.lr_warmup_steps} must be >= 0.")
    _require(
        cfg.dist_timeout_s > 0, f"dist_timeout_s={cfg.dist_timeout_s} must be positive seconds."
    )
    every = cfg.checkpoint.every_steps
    _require(
        every >= 0 and every % cfg.log_every == 0,
        f"checkpoint.every_steps={every} must be 0 (none) or a multiple of "
        f"log_every={cfg.log_every}, so checkpoints fall between timing windows.",
    )
    _require(
        every == 0 or cfg.repeats == 1,
        f"checkpoint.every_steps={every} with repeats={cfg.repeats}: a checkpoint continues "
        "one run; set repeats=1 or checkpoint.every_steps=0.",
    )
    d = cfg.ddp
    _require(d.bucket_cap_mb > 0, f"ddp.bucket_cap_mb={d.bucket_cap_mb} must be positive.")
    _require(d.powersgd_rank > 0, f"ddp.powersgd_rank={d.powersgd_rank} must be positive.")


def _check_debug(cfg: DictConfig, world_size: int) -> None:
    crash = cfg.debug
    if crash.crash_at_step is None:
        return
    _require(
        1 <= crash.crash_at_step <= cfg.steps,
        f"debug.crash_at_step={crash.crash_at_step} must be a step from 1 to steps={cfg.steps}, "
        "or null.",
    )
    _require(
        0 <= crash.crash_rank < world_size,
        f"debug.crash_rank={crash.crash_rank} must be a rank from 0 to {world_size - 1}.",
    )


def _check_model(cfg: DictConfig) -> None:
    m = cfg.model
    _require(m.weight_decay >= 0, f"model.weight_decay={m.weight_decay} must be >= 0.")
    if m.input == "tokens":
        for key in ("vocab_size", "seq_len", "n_layer", "n_head", "d_model"):
            _require(m[key] > 0, f"model.{key}={m[key]} must be positive.")
        _require(
            m.d_model % m.n_head == 0,
            f"model.d_model={m.d_model} must be a multiple of model.n_head={m.n_head}.",
        )
        _require(
            cfg.data.name == "synthetic",
            f"model={m.name} trains on tokens and data={cfg.data.name} holds images; "
            "use data=synthetic.",
        )
        return
    _require(
        cfg.data.image_size > 0,
        f"data.image_size={cfg.data.image_size} must be positive (it follows model.image_size "
        "unless set).",
    )
    _require(
        cfg.data.num_classes > 0,
        f"data.num_classes={cfg.data.num_classes} must be positive (it follows "
        "model.num_classes unless set).",
    )
    if m.name == "vit_b_16":
        _require(
            cfg.data.image_size % 16 == 0,
            f"data.image_size={cfg.data.image_size} must be a multiple of 16 for model=vit_b_16.",
        )


def _check_data(cfg: DictConfig, global_batch: int) -> None:
    d = cfg.data
    if d.name == "fake":
        _require(
            d.size >= global_batch,
            f"data.size={d.size} is smaller than one global batch ({global_batch}); "
            "raise data.size or lower batch.",
        )
    if d.name in ("imagefolder", "cifar10"):
        _require(
            not OmegaConf.is_missing(d, "root") and d.root,
            f"data.root is not set; data={d.name} reads from it: add data.root=/path/to/data.",
        )
        root = Path(d.root).expanduser()
        if d.name == "cifar10" and not d.download:
            _require(
                (root / "cifar-10-batches-py").is_dir(),
                f"data.root={d.root} holds no cifar-10-batches-py folder; point data.root at the "
                "folder that holds it, or add data.download=true.",
            )
        elif d.name == "imagefolder":
            _require(
                root.is_dir(),
                f"data.root={d.root} is not a directory; point it at an ImageNet-style folder "
                "(one subfolder per class).",
            )
        _require(
            not root.is_dir() or os.access(root, os.R_OK | os.X_OK),
            f"data.root={d.root} cannot be read by this user; fix its permissions or copy it.",
        )
    _require(d.num_workers >= 0, f"data.num_workers={d.num_workers} must be >= 0.")


def _check_task(cfg: DictConfig) -> None:
    t = cfg.task
    _require(
        t.no_sync_steps >= 0, f"task.no_sync_steps={t.no_sync_steps} must be >= 0 (0 skips it)."
    )
    if t.name != "allreduce":
        return
    _require(len(t.ops) > 0, "task.ops is empty; list collectives, e.g. task.ops=[all_reduce].")
    _require(t.min_bytes > 0, f"task.min_bytes={t.min_bytes} must be positive.")
    _require(
        t.max_bytes is None or t.max_bytes >= t.min_bytes,
        f"task.max_bytes={t.max_bytes} is below task.min_bytes={t.min_bytes}; raise it, "
        "or set task.max_bytes=null for the default.",
    )
    _require(t.size_factor >= 2, f"task.size_factor={t.size_factor} must be at least 2.")
    _require(t.iters > 0, f"task.iters={t.iters} must be positive.")
    _require(t.warmup_iters >= 0, f"task.warmup_iters={t.warmup_iters} must be >= 0.")
    _require(
        t.dtype in TENSOR_DTYPES,
        f"task.dtype={t.dtype} is not one of {', '.join(TENSOR_DTYPES)}.",
    )


def _resolve_devices(cfg: DictConfig, machine: Machine) -> tuple[str, str, int]:
    """(backend, device_type, nproc_per_node)."""
    backend = str(cfg.backend.name)
    gpus = machine.cuda_devices
    if backend == "nccl":
        _require(
            gpus > 0,
            "backend=nccl needs CUDA GPUs and none is visible; use backend=gloo or backend=auto.",
        )
    if backend == "auto":
        backend = "nccl" if gpus > 0 else "gloo"
    device_type = "cuda" if gpus > 0 else "cpu"
    devices = cfg.devices
    if machine.outside is not None:
        started = machine.outside.local_world_size
        _require(
            devices is None or devices == started,
            f"devices={devices} but the outside launcher started {started} processes on this "
            "node; leave devices unset under torchrun or SLURM.",
        )
        devices = started
    if devices is None:
        devices = gpus if gpus > 0 else CPU_DEFAULT_DEVICES
    _require(devices > 0, f"devices={devices} must be positive, or null for every visible GPU.")
    if device_type == "cuda":
        _require(
            devices <= gpus,
            f"devices={devices} but only {gpus} CUDA GPU(s) are visible; set devices<={gpus} or "
            "leave devices unset to use them all.",
        )
    return backend, device_type, devices


def _nodes(machine: Machine, nproc_per_node: int) -> int:
    if machine.outside is None:
        return 1
    world = machine.outside.world_size
    _require(
        world % nproc_per_node == 0,
        f"the outside launcher's world of {world} processes does not split into nodes of "
        f"{nproc_per_node}; start the same number of processes on every node.",
    )
    return world // nproc_per_node


def _resolve_precision(cfg: DictConfig, device_type: str, notes: list[str]) -> str:
    name = str(cfg.precision.name)
    if device_type == "cpu" and name == "fp16":
        raise ConfigError(
            "precision=fp16 needs a CUDA GPU (float16 autocast with a GradScaler); "
            "use precision=bf16 or precision=fp32 on CPU."
        )
    if device_type == "cpu" and name == "tf32":
        notes.append("precision=tf32 runs as fp32 on CPU: TF32 is a GPU tensor-core mode.")
        return "fp32"
    return name


def _check_speed(cfg: DictConfig, device_type: str, notes: list[str]) -> None:
    """compile and cuda_graphs: where they can run, and that their set-up is not timed."""
    _require(
        cfg.compile_mode in COMPILE_MODES,
        f"compile_mode={cfg.compile_mode} is not one of {', '.join(COMPILE_MODES)}.",
    )
    if cfg.task.name != "train":
        if cfg.compile or cfg.cuda_graphs:
            notes.append(f"compile and cuda_graphs apply to task=train, not task={cfg.task.name}.")
        return
    if cfg.compile:
        _require(
            cfg.warmup_steps >= COMPILE_STEPS,
            f"warmup_steps={cfg.warmup_steps} would time torch.compile's compilation; set "
            f"warmup_steps>={COMPILE_STEPS} with compile=true.",
        )
    if not cfg.cuda_graphs:
        return
    _require(
        device_type == "cuda",
        "cuda_graphs=true needs a CUDA GPU and none is visible; remove cuda_graphs=true.",
    )
    _require(
        not cfg.compile,
        "cuda_graphs=true and compile=true both capture the step; use one of them (compile's "
        "own CUDA graphs: compile=true compile_mode=reduce-overhead).",
    )
    _require(
        not cfg.precision.grad_scaler,
        f"cuda_graphs=true cannot capture precision={cfg.precision.name}'s GradScaler, which "
        "reads its overflow flag on the host every step; use precision=bf16, tf32 or fp32.",
    )
    _require(
        cfg.ddp.comm_hook != "powersgd",
        "cuda_graphs=true replays the step as captured, and ddp.comm_hook=powersgd changes "
        "between steps; use ddp.comm_hook=none, fp16 or bf16.",
    )
    _require(
        not cfg.ddp.find_unused_parameters,
        "cuda_graphs=true needs the same graph every step; set ddp.find_unused_parameters=false.",
    )
    _require(
        cfg.warmup_steps > CUDA_GRAPH_EAGER_STEPS,
        f"warmup_steps={cfg.warmup_steps} would time the {CUDA_GRAPH_EAGER_STEPS} eager steps "
        "and the capture that cuda_graphs=true runs first; set "
        f"warmup_steps>={CUDA_GRAPH_EAGER_STEPS + 1}.",
    )


def _check_known_keys(plain: dict[str, Any]) -> None:
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(plain) - known)
    _require(
        not unknown,
        f"unknown top-level key {', '.join(unknown)}; the keys are {', '.join(sorted(known))}.",
    )


def make_plan(
    cfg: DictConfig, job_dir: str, overrides: list[str], machine: Machine | None = None
) -> JobPlan:
    """Check ``cfg`` and resolve it for this machine; raises ConfigError on bad input."""
    machine = machine or Machine.current()
    notes: list[str] = []
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(plain, dict)
    _check_known_keys(plain)
    _check_ranges(cfg)
    backend, device_type, nproc = _resolve_devices(cfg, machine)
    nnodes = _nodes(machine, nproc)
    _check_debug(cfg, nnodes * nproc)
    precision = _resolve_precision(cfg, device_type, notes)
    _check_speed(cfg, device_type, notes)
    global_batch = cfg.batch * nproc * nnodes
    _check_task(cfg)
    if cfg.task.name == "train":
        _check_model(cfg)
        _check_data(cfg, global_batch)
    else:
        plain["task"]["max_bytes"] = plain["task"]["max_bytes"] or DEFAULT_MAX_BYTES[device_type]
    env = plan_env(cfg.interconnect.env, machine.environ)
    notes.extend(env.warnings(cfg.interconnect.name))
    if backend == "gloo" and cfg.interconnect.name != "auto":
        notes.append(
            f"interconnect={cfg.interconnect.name} sets NCCL variables, which have no effect on "
            "backend=gloo."
        )
    lr = scaled_lr(cfg.base_lr, cfg.scaling.rule, global_batch, cfg.scaling.reference_batch)
    return JobPlan(
        config=plain,
        overrides=list(overrides),
        job_dir=str(job_dir),
        backend=backend,
        device_type=device_type,
        nproc_per_node=nproc,
        nnodes=nnodes,
        in_place=machine.outside is not None,
        precision=precision,
        global_batch=global_batch,
        lr=lr,
        env=env,
        notes=notes,
    )
