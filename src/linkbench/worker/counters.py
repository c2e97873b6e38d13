"""The GPU's own counters during the timed steps: a second witness of what crossed the link.

A sampler thread on each worker reads NVML (nvidia-ml-py) for its GPU ``hw_sample_hz``
times a second, off the training loop's path: the share of time a kernel ran
(``nvmlDeviceGetUtilizationRates().gpu``), memory used, power (milliwatts), the SM clock
and the temperature (which :mod:`linkbench.analysis.conditions` compares between the jobs of
a round), and PCIe throughput (``nvmlDeviceGetPcieThroughput``, KB/s over NVML's 20 ms
window). Cumulative counters are read once at the start and once at the end of the timed
steps: NVLink data sent and received summed over every link (field values
``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/_RX`` with scope ``UINT_MAX``, KiB) and PCIe bytes
(``NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES``, on the H200 a 32-bit counter, whose one wrap
between two reads is undone). Whatever the driver does not support is named in
``unsupported``; without a GPU or NVML the block says why; nothing here ever fails a job.
"""

from __future__ import annotations

import statistics
import threading
import time
from typing import Any

import torch

UINT_MAX = 0xFFFFFFFF
KIB = 1024
# Field ids (nvml.h): NVLink data over every link (scope UINT_MAX), PCIe byte counters.
NVLINK_TX, NVLINK_RX = 138, 139
PCIE_TX_BYTES, PCIE_RX_BYTES = 197, 198
COUNTER_WRAP_32 = 1 << 32
# What each sample reads; the record keeps each one's mean over the timed steps.
SAMPLED = (
    "gpu_util_pct", "memory_used_gb", "power_w", "pcie_tx_gb_s", "pcie_rx_gb_s",
    "sm_clock_mhz", "temperature_c",
)  # fmt: skip
# nvmlValueType_t -> the member of nvmlValue_t that holds it (nvml.h).
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal"}


def _gpu_uuid(device: torch.device) -> str:
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


class CounterSampler:
    """NVML samples of one GPU between :meth:`start` and :meth:`stop`."""

    def __init__(self, device: torch.device, sample_hz: float) -> None:
        self.sample_hz = sample_hz
        self.reason: str | None = None
        self.samples: list[dict[str, float]] = []
        self.unsupported: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nv: Any = None
        self._handle: Any = None
        self._start: dict[str, int | None] = {}
        self._wraps: set[str] = set()
        self._started_at = 0.0
        if device.type != "cuda":
            self.reason = "no GPU: NVML counters need a CUDA device"
        elif sample_hz <= 0:
            self.reason = "hw_sample_hz=0: sampling is off"
        else:
            try:
                import pynvml as nv

                nv.nvmlInit()
                self._nv, self._handle = nv, nv.nvmlDeviceGetHandleByUUID(_gpu_uuid(device))
            except Exception as error:
                self.reason = f"NVML unavailable: {error}"

    @property
    def available(self) -> bool:
        return self.reason is None

    def start(self) -> None:
        if not self.available:
            return
        self._start = self._counters()
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="linkbench-nvml", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = 1.0 / self.sample_hz
        while not self._stop.wait(period):
            self.samples.append(self._sample())

    def _read(self, name: str, read: Any) -> float | None:
        if name in self.unsupported:
            return None
        try:
            return float(read())
        except Exception:
            self.unsupported.add(name)
            return None

    def _sample(self) -> dict[str, float]:
        nv, h = self._nv, self._handle
        reads = {
            "gpu_util_pct": lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu,
            "memory_used_gb": lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 1e9,
            "power_w": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1e3,
            "pcie_tx_gb_s": lambda: nv.nvmlDeviceGetPcieThroughput(h, 0) * 1e3 / 1e9,
            "pcie_rx_gb_s": lambda: nv.nvmlDeviceGetPcieThroughput(h, 1) * 1e3 / 1e9,
            "sm_clock_mhz": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "temperature_c": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        }
        values = {name: self._read(name, read) for name, read in reads.items()}
        return {name: value for name, value in values.items() if value is not None}

    def _counters(self) -> dict[str, int | None]:
        """Cumulative counters now: NVLink KiB over every link, PCIe bytes."""
        nv = self._nv
        fields = {
            "nvlink_tx": (NVLINK_TX, UINT_MAX),
            "nvlink_rx": (NVLINK_RX, UINT_MAX),
            "pcie_tx": (PCIE_TX_BYTES, 0),
            "pcie_rx": (PCIE_RX_BYTES, 0),
        }
        try:
            values = nv.nvmlDeviceGetFieldValues(self._handle, list(fields.values()))
        except Exception:
            self.unsupported.update(f"{name}_bytes" for name in fields)
            return dict.fromkeys(fields)
        out: dict[str, int | None] = {}
        for name, value in zip(fields, values, strict=True):
            if value.nvmlReturn != nv.NVML_SUCCESS:
                self.unsupported.add(f"{name}_bytes")
                out[name] = None
                continue
            member = VALUE_MEMBERS.get(value.valueType, "ullVal")
            out[name] = int(getattr(value.value, member))
            if member == "uiVal":
                self._wraps.add(name)
        return out

    def stop(self, steps: int) -> dict[str, Any]:
        """End sampling; the ``hw`` record of this rank for ``steps`` timed steps."""
        if not self.available:
            return {"available": False, "reason": self.reason}
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        elapsed = time.monotonic() - self._started_at
        end = self._counters()
        out: dict[str, Any] = {
            "available": True,
            "sample_hz": self.sample_hz,
            "samples": len(self.samples),
            "seconds": elapsed,
            "steps": steps,
        }
        for name in SAMPLED:
            values = [s[name] for s in self.samples if name in s]
            if values:
                out[f"{name}_mean"] = statistics.fmean(values)
        for name, begin in self._start.items():
            final = end.get(name)
            if begin is None or final is None or not steps:
                continue
            moved = final - begin
            if name in self._wraps:
                moved %= COUNTER_WRAP_32  # a 32-bit counter: one wrap at most between reads
            if name.startswith("nvlink"):
                moved *= KIB
            out[f"{name}_bytes_per_step"] = moved / steps
        out["unsupported"] = sorted(self.unsupported)
        self._nv.nvmlShutdown()
        return out


def combine(ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The job's ``hw`` block: every rank's record and the means over the ranks that had one."""
    usable = [r for r in ranks if r.get("available")]
    if not usable:
        return {"available": False, "reason": ranks[0].get("reason") if ranks else None}
    keys = sorted({k for r in usable for k, v in r.items() if k.endswith(("_mean", "_per_step"))})
    means = {k: statistics.fmean(r[k] for r in usable if k in r) for k in keys}
    return {"available": True, **means, "ranks": ranks}
