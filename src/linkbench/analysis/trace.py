"""Where a step's time goes, read from the torch.profiler traces a ``profile=trace`` job wrote.

Per rank, over the profiled steps, divided by their number (milliseconds per step):

- **window**: on a GPU, the span of the device's own events (kernels, copies, sets); on CPU,
  the span of the ``ProfilerStep#N`` annotations.
- **communication**: GPU kernels whose name starts with ``nccl`` (HolisticTraceAnalysis'
  rule, ``^nccl.*Kernel``, matches both ``ncclKernel_...`` and ``ncclDevKernel_...``); on
  CPU, gloo's ``gloo:<collective>`` annotations, which run on gloo's own thread. An injected
  communication delay (``debug.comm_delay_ms``) counts as communication: on CPU its
  ``linkbench:comm_delay`` range, on a GPU the kernels launched inside that range (matched
  by their correlation ids).
- **computation**: GPU kernels that are neither communication nor memory copies and sets (as
  HTA classifies them); on CPU, ``aten::`` operators on every other thread.
- Both are merged across streams or threads into unions of intervals; then
  ``overlapped = |compute and comm|``, ``exposed_comm = |comm| - overlapped``,
  ``compute_only = |compute| - overlapped``, ``busy = |compute or comm|`` and
  ``other = window - busy`` (idle, copies, launch gaps).
- **overlap_ratio** = overlapped / |comm|: HTA's "time computing while communicating / time
  communicating" (HolisticTraceAnalysis, docs/source/features/comm_comp_overlap.rst).

Where HolisticTraceAnalysis (``pip install HolisticTraceAnalysis``) is installed, its own overlap
figure for GPU traces is recorded beside ours (``hta_overlap_ratio``), so the two check each
other; on CPU traces it has no communication to find.

``python -m linkbench.analysis.trace JOB_DIR`` prints a job's breakdown.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from linkbench.files import COMM_DELAY_RANGE, TRACE_DIR, TRACE_FILES

GPU_COMM = re.compile(r"^nccl", re.IGNORECASE)
GPU_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)", re.IGNORECASE)
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
CPU_COMM = re.compile(r"^gloo:")
STEP = re.compile(r"^ProfilerStep#\d+$")

Interval = tuple[float, float]
# A traced step this many times the untraced one is reported as stretched by the profiler.
STRETCH_WARNING = 1.2


def load_trace(path: Path) -> dict[str, Any]:
    """A Chrome-format trace, gzipped or not."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def union(intervals: list[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: list[Interval]) -> float:
    return sum(end - start for start, end in intervals)


def intersection(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Where two unions (sorted, disjoint) are both active."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def clip(intervals: list[Interval], span: Interval) -> list[Interval]:
    """The parts of the intervals inside ``span`` (work of a step outside the window)."""
    return [(max(a, span[0]), min(b, span[1])) for a, b in intervals if b > span[0] and a < span[1]]


@dataclass(frozen=True)
class Breakdown:
    """One rank's step, in milliseconds per profiled step."""

    rank: int
    device: str
    steps: int
    step_ms: float
    compute_ms: float
    comm_ms: float
    compute_only_ms: float
    overlapped_ms: float
    exposed_comm_ms: float
    other_ms: float
    busy_ms: float
    overlap_ratio: float | None
    comm_events: int


def _span(event: dict[str, Any]) -> Interval:
    start = float(event["ts"])
    return start, start + float(event.get("dur", 0.0))


def _correlation(event: dict[str, Any]) -> Any:
    return (event.get("args") or {}).get("correlation")


def _launched_inside(events: list[dict[str, Any]], ranges: list[dict[str, Any]]) -> set[Any]:
    """Correlation ids of the kernel launches the host made inside ``ranges`` (same thread),
    which link each launch to its kernel on the device timeline."""
    spans = [(r.get("tid"), *_span(r)) for r in ranges if r.get("cat") == "user_annotation"]
    return {
        _correlation(e)
        for e in events
        if e.get("cat") == "cuda_runtime"
        and "Launch" in str(e.get("name", ""))
        and any(tid == e.get("tid") and a <= float(e["ts"]) <= b for tid, a, b in spans)
    }


def breakdown(trace: dict[str, Any], rank: int = 0) -> Breakdown:
    """The step of one rank's trace, split into compute, communication and the rest."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    # Kineto repeats each ProfilerStep annotation on the GPU's timeline: count the host's.
    marks = [e for e in events if STEP.match(str(e.get("name", "")))]
    steps = [e for e in marks if e.get("cat") != "gpu_user_annotation"]
    if not steps:  # a trace without the host's activity: the device's copies of the marks
        steps = [e for e in marks if e.get("cat") == "gpu_user_annotation"]
    device = [e for e in events if e.get("cat") in DEVICE_CATEGORIES]
    delays = [e for e in events if e.get("name") == COMM_DELAY_RANGE and e.get("cat") != "kernel"]
    if device:
        kernels = [e for e in device if e.get("cat") == "kernel"]
        delayed = _launched_inside(events, delays)
        comm_events = [
            e for e in kernels if GPU_COMM.match(e.get("name", "")) or _correlation(e) in delayed
        ]
        compute_events = [
            e
            for e in kernels
            if not GPU_COMM.match(e["name"])
            and not GPU_MEMORY.match(e["name"])
            and _correlation(e) not in delayed
        ]
        window = union([_span(e) for e in device])
        kind = "cuda"
    else:
        comm_events = [e for e in events if CPU_COMM.match(str(e.get("name", "")))] + delays
        comm_threads = {e.get("tid") for e in comm_events}
        compute_events = [
            e
            for e in events
            if e.get("cat") == "cpu_op"
            and str(e.get("name", "")).startswith("aten::")
            and e.get("tid") not in comm_threads
        ]
        window = union([_span(e) for e in steps])
        kind = "cpu"
    window_span = (window[0][0], window[-1][1]) if window else (0.0, 0.0)
    comm = clip(union([_span(e) for e in comm_events]), window_span)
    compute = clip(union([_span(e) for e in compute_events]), window_span)
    overlapped = length(intersection(comm, compute))
    busy = length(union(comm + compute))
    n = max(1, len(steps))
    per_step = 1e-3 / n  # trace times are microseconds
    comm_us, compute_us = length(comm), length(compute)
    return Breakdown(
        rank=rank,
        device=kind,
        steps=len(steps),
        step_ms=(window_span[1] - window_span[0]) * per_step,
        compute_ms=compute_us * per_step,
        comm_ms=comm_us * per_step,
        compute_only_ms=(compute_us - overlapped) * per_step,
        overlapped_ms=overlapped * per_step,
        exposed_comm_ms=(comm_us - overlapped) * per_step,
        other_ms=(window_span[1] - window_span[0] - busy) * per_step,
        busy_ms=busy * per_step,
        overlap_ratio=overlapped / comm_us if comm_us else None,
        comm_events=len(comm_events),
    )


def _hta_overlap(trace_dir: Path) -> dict[int, float] | None:
    """HolisticTraceAnalysis' overlap per rank, where it is installed and finds kernels."""
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    try:
        frame = TraceAnalysis(
            trace_dir=str(trace_dir), include_last_profiler_step=True
        ).get_comm_comp_overlap(visualize=False)
    except Exception:  # a trace HTA cannot read: ours stands alone
        return None
    pairs = zip(frame["rank"], frame["comp_comm_overlap_pctg"], strict=True)
    found = {int(rank): float(percent) / 100 for rank, percent in pairs}
    return {rank: value for rank, value in found.items() if value == value}  # drop NaN


def analyse(job_dir: Path) -> dict[str, Any] | None:
    """The ``trace`` block of a job's result.json: every rank's breakdown, their mean, the
    files; None when the job wrote no trace."""
    trace_dir = Path(job_dir) / TRACE_DIR
    files = sorted(trace_dir.glob(TRACE_FILES))
    if not files:
        return None
    ranks = []
    for path in files:
        trace = load_trace(path)
        rank = int((trace.get("distributedInfo") or {}).get("rank", path.stem.split(".")[0][4:]))
        ranks.append(asdict(breakdown(trace, rank)))
    numeric = [k for k, v in ranks[0].items() if isinstance(v, float) and k != "overlap_ratio"]
    mean: dict[str, Any] = {k: statistics.fmean(r[k] for r in ranks) for k in numeric}
    ratios = [r["overlap_ratio"] for r in ranks if r["overlap_ratio"] is not None]
    mean["overlap_ratio"] = statistics.fmean(ratios) if ratios else None
    out: dict[str, Any] = {"files": [str(p) for p in files], "ranks": ranks, "mean": mean}
    if (hta := _hta_overlap(trace_dir)) is not None:
        out["hta_overlap_ratio"] = hta
    return out


def with_untraced(trace: dict[str, Any], untraced_step_ms: float | None) -> dict[str, Any]:
    """The trace block with the step time of the untraced, timed steps beside the traced one
    (``untraced_step_ms``, ``stretch`` = traced / untraced) and a warning when the profiler
    stretched the step by more than :data:`STRETCH_WARNING`."""
    if not untraced_step_ms or not trace["mean"].get("step_ms"):
        return trace
    trace = {**trace, "mean": dict(trace["mean"])}  # the analysed traces stay as they are
    mean = trace["mean"]
    stretch = mean["step_ms"] / untraced_step_ms
    mean.update(untraced_step_ms=untraced_step_ms, stretch=stretch)
    if stretch > STRETCH_WARNING:
        trace["warning"] = (
            f"the profiler stretched the step {stretch:.2f}x ({mean['step_ms']:.2f} ms per traced "
            f"step against {untraced_step_ms:.2f} ms timed without it): the breakdown describes "
            "the traced steps, and their 'other' time holds the profiler's own cost"
        )
    return trace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m linkbench.analysis.trace",
        description="A traced job's step split into compute, communication and the rest.",
    )
    parser.add_argument("job_dir", type=Path, help="the job's output directory")
    job_dir = parser.parse_args(argv).job_dir
    found = analyse(job_dir)
    if found is None:
        print(f"{job_dir} has no {TRACE_DIR}/{TRACE_FILES}: run the job with profile=trace",
              file=sys.stderr)  # fmt: skip
        return 2
    json.dump(found, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
