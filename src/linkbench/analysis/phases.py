"""Where a job's time goes, phase by phase, so that no second of a sweep is unaccounted for.

Every process of a job marks the end of each phase it runs on the wall clock
(:func:`linkbench.worker.phases.mark`: rank 0's marks come back with its results); the
launching process adds what it does before the first launch, between runs and after the last
(:func:`durations`). A job's ``result.json`` holds ``phases_s`` (seconds per phase, summed
over its runs) and ``duration_s``; their difference is what no phase claims (a few
milliseconds). The sweep's summary sums the phases over its jobs beside the sweep's wall time
(:func:`sweep_line`), the rest being the sweep's own work (Hydra composing each job's config,
planning every configuration up front, the summaries written after each round).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from linkbench.result import JobResult

# Every phase, in the order a job runs them, with what the console calls it.
PHASES: dict[str, str] = {
    "planning": "planning",  # the plan, the parts' check, the link's network: before launch
    "process_start": "process start",  # from the launch to the worker's first line of code
    "rendezvous": "rendezvous",  # the process group
    "link_probe": "link probe",  # interconnect=emulated: the link's own all-reduce probe
    "set_up": "set-up",  # model, data, strategy, TensorBoard, hardware description
    "first_step": "first step",  # warm-up: cuDNN's tuning, compilation, CUDA-graph capture
    "untimed_steps": "untimed steps",
    "timed_steps": "timed steps",  # wall clock, with the logging between the timed windows
    "evaluation": "evaluation",
    "counters": "counters",  # every rank's hardware counters gathered
    "trace": "trace",  # profile=trace: the profiled steps and their files
    "probe": "communication probe",
    "task": "task",  # a task's time that it marks no phase of (allreduce, links)
    "teardown": "teardown",  # the process group destroyed, the processes joined
    "record": "record",  # transports checked, result.json, manifest, TensorBoard written
}


def durations(marks: Sequence[tuple[str, float]], started_at: float) -> dict[str, float]:
    """Seconds per phase from ``marks`` ((phase, the wall-clock time it ended), in order) and
    the time the first one started; a phase marked twice is summed."""
    out: dict[str, float] = {}
    previous = started_at
    for name, at in marks:
        out[name] = out.get(name, 0.0) + max(0.0, at - previous)
        previous = max(previous, at)
    return out


def add(total: dict[str, float], more: Mapping[str, float]) -> dict[str, float]:
    """``total`` with ``more``'s seconds added, phase by phase."""
    for name, seconds in more.items():
        total[name] = total.get(name, 0.0) + seconds
    return total


def ordered(phases: Mapping[str, float]) -> list[tuple[str, float]]:
    """(phase, seconds) in the order a job runs them (unknown phases last)."""
    known = [(n, phases[n]) for n in PHASES if n in phases]
    return known + [(n, s) for n, s in phases.items() if n not in PHASES]


def job_line(phases: Mapping[str, float], wall_s: float) -> str:
    """The console's line for one job: its wall time and each phase's seconds."""
    shown = ", ".join(f"{PHASES.get(n, n)} {s:.2f}" for n, s in ordered(phases) if s >= 0.005)
    return f"{wall_s:.1f} s: {shown}"


def sweep_phases(results: Iterable[JobResult]) -> tuple[dict[str, float], float]:
    """The phases summed over a sweep's jobs, and the sum of their wall times."""
    total: dict[str, float] = {}
    wall = 0.0
    for result in results:
        add(total, result.get("phases_s") or {})
        wall += float(result.get("duration_s") or 0.0)
    return total, wall


def sweep_line(results: Iterable[JobResult], sweep_wall_s: float) -> str:
    """Of the sweep's wall time: each phase summed over its jobs, then the sweep's own."""
    total, jobs_wall = sweep_phases(results)
    parts = [f"{PHASES.get(n, n)} {s:.1f}" for n, s in ordered(total) if s >= 0.05]
    own = sweep_wall_s - jobs_wall
    untold = jobs_wall - sum(total.values())
    if untold >= 0.05:
        parts.append(f"unaccounted in jobs {untold:.1f}")
    parts.append(f"the sweep's own (Hydra, planning, summaries) {max(0.0, own):.1f}")
    return f"of {sweep_wall_s:.1f} s: " + ", ".join(parts)
