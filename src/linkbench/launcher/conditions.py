"""What the machine was doing when a run started and ended, to explain a run that drifted.

The launching process reads, just before it launches a run's workers and just after they
return: the host's load (the 1-minute load average, ``os.getloadavg``, beside the number of
CPUs), the CPU seconds so far of the cores this process may use (``/proc/stat``: all but idle
and I/O wait), of this process with its descendants and of the kernel's threads on those
cores (``/proc/PID/stat``), from which :mod:`linkbench.analysis.conditions` tells what other
programs took of the cores during the run (the load average cannot: it counts the run's own
ranks, and lags by a minute), and, through NVML (nvidia-ml-py), the SM clock, temperature,
power draw and the reasons its clocks are held down
(``nvmlDeviceGetCurrentClocksEventReasons``; an idle GPU's own reason is left out) of every
GPU the job can see: NVML lists the host's GPUs whatever ``CUDA_VISIBLE_DEVICES`` says, so
the launcher reads the ones it names (by index or UUID prefix, as CUDA does). Without NVML
or a visible GPU the GPU part says why. Reading never fails a job.
:func:`linkbench.analysis.conditions.drifted` compares runs of one round."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

# nvmlClocksEventReason* bits (nvml.h) and the names the record gives them; GpuIdle (0x1)
# is what every GPU reports between runs, so it is no reason for a drift.
CLOCK_REASONS = {
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}


def snapshot() -> dict[str, Any]:
    """The host's load and every GPU's clock, temperature, power and clock reasons now."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    # cpus_usable: the cores this process may run on, from which each rank's threads are set
    out: dict[str, Any] = {"cpus": os.cpu_count(), "cpus_usable": usable or os.cpu_count()}
    try:
        out["load_1m"] = round(os.getloadavg()[0], 2)
    except OSError:  # not every platform has a load average
        out["load_1m"] = None
    out["cpu_s"] = cpu_seconds(os.sched_getaffinity(0) if usable else range(os.cpu_count() or 1))
    out.update(_gpus())
    return out


PF_KTHREAD = 0x00200000  # /proc/PID/stat's flags: a kernel thread (include/linux/sched.h)


def cpu_seconds(cores: Collection[int], proc: Path = Path("/proc")) -> dict[str, float] | None:
    """CPU seconds so far, at ``at_s`` (the monotonic clock): ``cores_busy_s`` the given cores
    spent on anything but idling and I/O waits (user, nice, system, interrupts: the kernel
    charges those to the process they interrupted as well, and steal: a virtual machine's
    time taken by its host), ``own_s`` this process and its descendants (those reaped
    included), ``kernel_s`` the kernel's threads last on those cores (such as the emulated
    links' packets in ksoftirqd). None where /proc cannot tell (not Linux)."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        busy = 0
        for line in (proc / "stat").read_text().splitlines():
            name, *fields = line.split()
            if name[3:].isdigit() and name.startswith("cpu") and int(name[3:]) in cores:
                busy += sum(int(fields[i]) for i in (0, 1, 2, 5, 6, 7))  # not idle, iowait
        stats = {}
        for path in proc.glob("[0-9]*/stat"):
            try:
                stats[int(path.parent.name)] = path.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):  # ended meanwhile
                continue
    except (OSError, ValueError, IndexError):
        return None
    children: dict[int, list[int]] = {}
    for pid, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    tree, own = [os.getpid()], 0
    while tree:
        pid = tree.pop()
        tree += children.get(pid, [])
        if pid in stats:
            own += sum(int(stats[pid][i]) for i in (11, 12, 13, 14))  # u, s, children's u, s
    kernel = sum(
        int(f[11]) + int(f[12])
        for f in stats.values()
        if int(f[6]) & PF_KTHREAD and len(f) > 36 and int(f[36]) in cores
    )
    return {"at_s": time.monotonic(), "cores_busy_s": busy / tick, "own_s": own / tick,
            "kernel_s": kernel / tick}  # fmt: skip


def _gpus() -> dict[str, Any]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and not visible.strip():
        return {"gpus": [], "gpus_unavailable": "CUDA_VISIBLE_DEVICES is empty: no GPU is visible"}
    try:
        import pynvml as nv

        nv.nvmlInit()
        count = nv.nvmlDeviceGetCount()
    except Exception as error:  # no driver, no GPU, no nvidia-ml-py
        return {"gpus": [], "gpus_unavailable": f"NVML unavailable: {error}"}
    try:
        names = visible_gpus(visible, count, lambda index: _uuid(nv, index))
        return {"gpus": [_gpu(nv, index, name) for index, name in names]}
    finally:
        nv.nvmlShutdown()


def visible_gpus(
    visible: str | None, count: int, uuid: Callable[[int], str]
) -> list[tuple[int, str]]:
    """(NVML index, the name CUDA_VISIBLE_DEVICES gave it) of each GPU a job can see.

    Like CUDA: entries are indices or UUID prefixes, and the list ends at the first entry that
    names no GPU. Unset: every GPU, named by its index."""
    if visible is None:
        return [(index, str(index)) for index in range(count)]
    found: list[tuple[int, str]] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isdigit() and int(entry) < count:
            found.append((int(entry), entry))
            continue
        matches = [i for i in range(count) if entry and uuid(i).startswith(entry)]
        if len(matches) != 1:
            break
        found.append((matches[0], entry))
    return found


def _uuid(nv: Any, index: int) -> str:
    try:
        uuid = nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(index))
    except Exception:
        return ""
    return uuid.decode() if isinstance(uuid, bytes) else str(uuid)


def _gpu(nv: Any, index: int, name: str) -> dict[str, Any]:
    gpu: dict[str, Any] = {"index": index}
    if name != str(index):
        gpu["visible_as"] = name
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as error:
        return {**gpu, "unavailable": str(error)}
    reads = {
        "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
        "temperature_c": lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
        "power_w": lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1e3,
        "clock_reasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle),
    }
    for key, read in reads.items():
        try:
            gpu[key] = read()
        except Exception:
            gpu[key] = None
    mask = gpu.pop("clock_reasons")
    if mask is not None:
        gpu["clock_reasons"] = [name for bit, name in CLOCK_REASONS.items() if mask & bit]
    return gpu
