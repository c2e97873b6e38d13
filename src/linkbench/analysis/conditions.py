"""Runs whose machine was not like their round mates': what could explain a drift.

Each job records the host's load and the GPUs' state at its run's start and end
(``conditions``, :mod:`linkbench.launcher.conditions`) and, with GPU counters, the mean SM
clock and temperature over its timed steps (``hw``, :mod:`linkbench.worker.counters`). The
jobs of one round ran minutes apart on the same machine, so they should look alike; a job is
named when

- the host's 1-minute load at its start or end differs from the median of its round mates'
  by one CPU's worth or a quarter of the CPUs, whichever is more (something else ran);
- its mean SM clock over the timed steps differs from theirs by more than
  :data:`CLOCK_SHARE` (the GPU clocked down or up);
- its mean temperature differs by more than :data:`TEMPERATURE_C`;
- NVML held its clocks down for power or heat at its start or end (:data:`THROTTLES`).

Nothing is dropped for it: the summary names the job, beside the verdicts.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from linkbench.result import JobResult

CLOCK_SHARE = 0.03
TEMPERATURE_C = 10.0
# Clock reasons that slow a GPU down against its will (the rest are settings or idling).
THROTTLES = ("sw_power_cap", "hw_slowdown", "sw_thermal", "hw_thermal", "hw_power_brake")


def _load(result: JobResult) -> float | None:
    runs = result.get("conditions") or []
    loads = [
        point.get("load_1m")
        for run in runs[-1:]
        for point in (run.get("start") or {}, run.get("end") or {})
    ]
    known = [x for x in loads if isinstance(x, (int, float))]
    return max(known) if known else None


OTHER_CORES = 0.25
"""Other programs' share of the usable cores, averaged over a run, from which the host was
busy for the run: its ranks' computing and the paths inside a node waited for other work."""


@dataclass(frozen=True)
class HostWork:
    """How busy the host was with other work during the busiest of some runs: other programs'
    cores on average over the run where the run recorded its CPU seconds, else (older
    records) the highest 1-minute load at a run's start or end, which counts the run's own
    ranks too."""

    figure: float
    cores: int
    other: bool
    """The figure is other programs' cores (else the load average)."""

    @property
    def busy(self) -> bool:
        """Other programs took more than OTHER_CORES of a core, or the load passed the cores."""
        return self.figure > OTHER_CORES if self.other else self.figure > (self.cores or 1)

    def __str__(self) -> str:
        if self.other:
            return f"other programs kept {self.figure:.2f} of its {self.cores} usable cores busy"
        return f"the host's load reached {self.figure:g} on {self.cores} usable cores"


def host_work(jobs: Iterable[JobResult]) -> HostWork | None:
    """The busiest run of these jobs (:class:`HostWork`); None where no run recorded either."""
    runs = [run for job in jobs for run in job.get("conditions") or []]
    other = [o for o in map(_other_cores, runs) if o is not None]
    if other:
        return HostWork(*max(other), other=True)
    points = [
        point
        for run in runs
        for point in (run.get("start") or {}, run.get("end") or {})
        if isinstance(point.get("load_1m"), (int, float))
    ]
    if not points:
        return None
    top = max(points, key=lambda p: p["load_1m"])
    return HostWork(float(top["load_1m"]), _cores(top), other=False)


def _other_cores(run: dict[str, Any]) -> tuple[float, int] | None:
    """Other programs' cores on average over one run, and the usable cores."""
    start, end = (run.get(when) or {} for when in ("start", "end"))
    first, last = start.get("cpu_s"), end.get("cpu_s")
    if not (first and last) or last["at_s"] <= first["at_s"]:
        return None
    taken = {key: last[key] - first[key] for key in ("cores_busy_s", "own_s", "kernel_s")}
    other_s = taken["cores_busy_s"] - taken["own_s"] - taken["kernel_s"]
    return max(0.0, other_s / (last["at_s"] - first["at_s"])), _cores(end)


def _cores(point: dict[str, Any]) -> int:
    return int(point.get("cpus_usable") or point.get("cpus") or 0)


def _throttles(result: JobResult) -> list[str]:
    found: set[str] = set()
    for run in (result.get("conditions") or [])[-1:]:
        for when in ("start", "end"):
            for gpu in (run.get(when) or {}).get("gpus", []):
                for reason in gpu.get("clock_reasons") or []:
                    if reason in THROTTLES:
                        found.add(f"GPU {gpu.get('index')} {reason} at its {when}")
    return sorted(found)


def _hw(result: JobResult, key: str) -> float | None:
    value = (result.get("hw") or {}).get(key)
    return float(value) if isinstance(value, (int, float)) else None


def drifted(results: list[JobResult]) -> list[str]:
    """One line per job whose conditions differ from its round mates' (see the module)."""
    rounds: dict[Any, list[JobResult]] = {}
    for result in results:
        if result.get("status") == "completed":
            rounds.setdefault(result.get("round"), []).append(result)
    lines = []
    for jobs in rounds.values():
        for job in jobs:
            mates = [j for j in jobs if j is not job]
            if why := _differences(job, mates):
                lines.append(f"- {job.get('job')}: {'; '.join(why)}")
    return lines


def _differences(job: JobResult, mates: list[JobResult]) -> list[str]:
    why = list(_throttles(job))
    if not mates:
        return why
    load = _load(job)
    others = [x for m in mates if (x := _load(m)) is not None]
    if load is not None and others:
        usual = statistics.median(others)
        cpus = job.get("conditions", [{}])[-1].get("start", {}).get("cpus") or 1
        if abs(load - usual) >= max(1.0, 0.25 * cpus):
            why.append(f"host load {load:.1f} (1-minute average) against {usual:.1f} for its "
                       "round mates")  # fmt: skip
    clock = _hw(job, "sm_clock_mhz_mean")
    clocks = [x for m in mates if (x := _hw(m, "sm_clock_mhz_mean")) is not None]
    if clock is not None and clocks:
        usual = statistics.median(clocks)
        if usual and abs(clock / usual - 1) > CLOCK_SHARE:
            why.append(f"SM clock {clock:,.0f} MHz over its timed steps against {usual:,.0f}")
    temperature = _hw(job, "temperature_c_mean")
    temperatures = [x for m in mates if (x := _hw(m, "temperature_c_mean")) is not None]
    if temperature is not None and temperatures:
        usual = statistics.median(temperatures)
        if abs(temperature - usual) > TEMPERATURE_C:
            why.append(f"GPU at {temperature:.0f} °C against {usual:.0f} °C")
    return why
