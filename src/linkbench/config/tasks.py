"""The built-in tasks (``task/``), one dataclass per option: its keys, what it refuses, its
headline metric, and the ``_target_`` of its runtime class, which only the workers import.
:func:`linkbench.config.registry.register_schema` stores each in Hydra's ConfigStore under its
name, so ``task=allreduce`` composes :class:`AllReduceTask` and its keys alone.

A new built-in task is one dataclass here (and its entry in :data:`TASKS`) and one runtime
class (``run``, ``finish``, ``report``: :mod:`linkbench.worker.task`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from linkbench.config.checks import require, require_not_negative, require_positive
from linkbench.config.choices import TENSOR_DTYPES, Collective
from linkbench.config.schema import Config, TaskConfig


@dataclass
class TrainTask(TaskConfig):
    """``task=train``: the job's training steps, timed (:mod:`linkbench.worker.train`); the
    headline is global samples/s."""

    name: str = "train"
    _target_: str = "linkbench.worker.train.Train"
    no_sync_steps: int = 10
    """After training: steps timed with and without gradient sync (0 skips the probe)."""

    headline = "samples_per_sec"
    trains = True

    def __post_init__(self) -> None:
        require(
            self.no_sync_steps >= 0,
            f"task.no_sync_steps={self.no_sync_steps} must be >= 0 (0 skips it).",
        )

    def check(self, config: Config, device_type: str, notes: list[str]) -> None:
        config.check_training()
        require(
            not config.cuda_graphs or device_type == "cuda",
            "cuda_graphs=true needs a CUDA GPU and none is visible; remove cuda_graphs=true.",
        )


# task.max_bytes=null means this many bytes, by device type.
DEFAULT_MAX_BYTES = {"cuda": 1 << 30, "cpu": 64 << 20}


@dataclass
class AllReduceTask(TaskConfig):
    """``task=allreduce``: every collective of ``ops`` over message sizes, with nccl-tests'
    algbw and busbw (:mod:`linkbench.worker.collectives`); the headline is the first op's
    peak busbw."""

    name: str = "allreduce"
    _target_: str = "linkbench.worker.collectives.AllReduce"
    ops: list[Collective] = field(
        default_factory=lambda: [
            Collective.all_reduce,
            Collective.all_gather,
            Collective.reduce_scatter,
        ]
    )
    dtype: str = "float32"
    min_bytes: int = 1024
    max_bytes: int | None = None
    """Largest message; null means 1 GiB on GPU and 64 MiB on CPU."""
    size_factor: int = 2
    """Each message size is this many times the previous."""
    warmup_iters: int = 5
    iters: int = 20

    headline = "busbw_gb_s_peak"

    def resolve(self, device_type: str) -> AllReduceTask:
        if self.max_bytes is not None:
            return self
        return dataclasses.replace(self, max_bytes=DEFAULT_MAX_BYTES[device_type])

    def check(self, config: Config, device_type: str, notes: list[str]) -> None:
        super().check(config, device_type, notes)
        require(
            len(self.ops) > 0, "task.ops is empty; list collectives, e.g. task.ops=[all_reduce]."
        )
        require_positive("task.", min_bytes=self.min_bytes, iters=self.iters)
        require(
            self.max_bytes is None or self.max_bytes >= self.min_bytes,
            f"task.max_bytes={self.max_bytes} is below task.min_bytes={self.min_bytes}; raise "
            "it, or set task.max_bytes=null for the default.",
        )
        require(self.size_factor >= 2, f"task.size_factor={self.size_factor} must be at least 2.")
        require_not_negative("task.", warmup_iters=self.warmup_iters)
        require(
            self.dtype in TENSOR_DTYPES,
            f"task.dtype={self.dtype} is not one of {', '.join(TENSOR_DTYPES)}.",
        )


@dataclass
class LinksTask(TaskConfig):
    """``task=links``: the copy-bandwidth matrix over every visible GPU (host<->GPU,
    on-device, and GPU->GPU peer and staged through the host, one and both directions),
    timed on rank 0 (:mod:`linkbench.worker.links`); the headline is the host-to-GPU
    bandwidth. Needs a GPU."""

    name: str = "links"
    _target_: str = "linkbench.worker.links.Links"
    sizes_mb: list[int] = field(default_factory=lambda: [1, 16, 256])
    """Copy sizes in MiB; the largest gives the matrix."""
    warmup_iters: int = 3
    iters: int = 20

    headline = "host_to_device_gb_s"

    def check(self, config: Config, device_type: str, notes: list[str]) -> None:
        super().check(config, device_type, notes)
        require(
            len(self.sizes_mb) > 0 and min(self.sizes_mb) > 0,
            f"task.sizes_mb={list(self.sizes_mb)} must list positive sizes, e.g. [1,16,256].",
        )
        require_positive("task.", iters=self.iters)
        require(
            device_type == "cuda",
            "task=links measures copies between GPUs and host memory and no GPU is visible; "
            "run it on a GPU machine (task=allreduce measures collectives on CPU).",
        )


TASKS: dict[str, type[TaskConfig]] = {
    "train": TrainTask,
    "allreduce": AllReduceTask,
    "links": LinksTask,
}
