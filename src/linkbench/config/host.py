"""The memory this machine lets a job use: what the plan sizes a job against and what the
launcher says of a rank the kernel killed (:mod:`linkbench.launcher.memory`).

Read from ``/proc/meminfo`` and the process's memory cgroup (v2's ``memory.max``, v1's
``memory.limit_in_bytes``), whichever is lower, and the GPUs' own from NVML (which, unlike
torch.cuda, starts no CUDA context in the launching process)."""

from __future__ import annotations

import functools
from pathlib import Path


def cgroup_memory_file(v2_name: str, v1_name: str) -> Path | None:
    """This process's memory cgroup's file: cgroup v2's ``v2_name`` or v1's ``v1_name``."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            found = Path("/sys/fs/cgroup/memory") / path.lstrip("/") / v1_name
        elif controllers == "":
            found = Path("/sys/fs/cgroup") / path.lstrip("/") / v2_name
        else:
            continue
        if found.is_file():
            return found
    return None


def memory_limit_bytes() -> int | None:
    """The memory this process may use: the machine's (MemTotal), or its cgroup's limit
    where that is lower; None where neither can be read."""
    limits = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                limits.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    path = cgroup_memory_file("memory.max", "memory.limit_in_bytes")
    try:
        text = path.read_text().strip() if path else "max"
        if text != "max":
            limits.append(int(text))
    except (OSError, ValueError):
        pass
    return min(limits) if limits else None


@functools.cache
def gpu_memory_bytes() -> int | None:
    """The first GPU's memory, from NVML (None without a GPU or NVML); asked once per
    process (a sweep's jobs plan against the same GPU)."""
    try:
        import pynvml as nv

        nv.nvmlInit()
        try:
            return int(nv.nvmlDeviceGetMemoryInfo(nv.nvmlDeviceGetHandleByIndex(0)).total)
        finally:
            nv.nvmlShutdown()
    except Exception:  # no driver, no GPU, no library
        return None
