"""What the machine was doing when a run started and ended, to explain a run that drifted.

The launching process reads, just before it launches a run's workers and just after they
return: the host's load (the 1-minute load average, ``os.getloadavg``, beside the number of
CPUs) and, through NVML (nvidia-ml-py), the SM clock, temperature, power draw and the
reasons its clocks are held down (``nvmlDeviceGetCurrentClocksEventReasons``; an idle GPU's
own reason is left out) of every GPU the job can see: NVML lists the host's GPUs whatever
``CUDA_VISIBLE_DEVICES`` says, so the launcher reads the ones it names (by index or UUID
prefix, as CUDA does). Without NVML or a visible GPU the GPU part says why. Reading never
fails a job. :func:`linkbench.analysis.conditions.drifted` compares runs of one round.
"""

from __future__ import annotations

import os
from collections.abc import Callable
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
    out.update(_gpus())
    return out


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
