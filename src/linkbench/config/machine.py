"""What the launching process can see of the machine a job plans for: its GPUs, cores and
memory, its environment, and the world an outside launcher (torchrun, SLURM) started it in.
:func:`linkbench.config.plan.make_plan` decides against it; tests hand in one of their own."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from linkbench.config.host import gpu_memory_bytes, memory_limit_bytes

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
    cpu_cores: int = 0
    """Cores this process may run on (0: unknown)."""
    memory_bytes: int = 0
    """Memory the job may use on this host (:mod:`linkbench.config.host`; 0: unknown)."""
    gpu_memory_bytes: int = 0
    """One GPU's memory (0: unknown, or no GPU)."""

    @classmethod
    def current(cls) -> Machine:
        import torch

        environ = dict(os.environ)
        outside = OutsideWorld.from_env(environ)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        gpus = torch.cuda.device_count()
        gpu_memory = (gpu_memory_bytes() or 0) if gpus else 0
        return cls(gpus, environ, outside, cores or 0, memory_limit_bytes() or 0, gpu_memory)
