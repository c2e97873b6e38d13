"""The trace analysis on a hand-made GPU trace with a known answer, and on a committed trace
of the project's own 2-rank gloo run checked against an independent count."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from linkbench.analysis.trace import (
    COMM_DELAY_RANGE,
    analyse,
    breakdown,
    load_trace,
    with_untraced,
)

DATA = Path(__file__).parent / "data"
GLOO_TRACE = DATA / "cpu-gloo-tiny-rank0.json.gz"


def kernel(name: str, start: float, end: float, stream: int = 7) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "ts": start, "dur": end - start,
            "tid": stream, "pid": 0}  # fmt: skip


def step(n: int, start: float, end: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "ts": start,
            "dur": end - start, "tid": 1, "pid": 100}  # fmt: skip


# Two steps on a GPU (times in microseconds): compute on stream 7, NCCL on stream 20.
#   compute   [0, 100] and [150, 250]      -> 200 us
#   nccl      [50, 200]                    -> 150 us, 100 us of it beside compute
#   memcpy    [250, 260]                   -> neither; the window ends at 260
HAND_MADE = {
    "traceEvents": [
        step(1, 0, 120),
        step(2, 120, 240),
        kernel("void at::native::vectorized_elementwise_kernel<4>", 0, 100),
        kernel("ampere_bf16_s16816gemm_bf16_128x64", 150, 250),
        kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            50,
            200,
            stream=20,
        ),
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoD (Device -> Device)",
            "ts": 250,
            "dur": 10,
            "tid": 7,
            "pid": 0,
        },
    ]
}


def test_a_hand_made_gpu_trace_splits_as_computed_by_hand():
    b = breakdown(HAND_MADE, rank=3)
    assert (b.rank, b.device, b.steps, b.comm_events) == (3, "cuda", 2, 1)
    per_step = {  # microseconds over 2 steps, in milliseconds per step
        "step_ms": 260 / 2e3,
        "compute_ms": 200 / 2e3,
        "comm_ms": 150 / 2e3,
        "overlapped_ms": 100 / 2e3,
        "exposed_comm_ms": 50 / 2e3,
        "compute_only_ms": 100 / 2e3,
        "busy_ms": 250 / 2e3,
        "other_ms": 10 / 2e3,
    }
    for key, expected in per_step.items():
        assert getattr(b, key) == pytest.approx(expected), key
    assert b.overlap_ratio == pytest.approx(100 / 150)


def host(cat: str, name: str, start: float, end: float, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": start, "dur": end - start, "tid": 5,
            "pid": 100, "args": args}  # fmt: skip


def test_an_injected_comm_delay_counts_as_communication_on_a_gpu():
    """The spin kernel launched inside linkbench:comm_delay (matched by its correlation id) is
    communication; the same kernel launched outside it (debug.step_delay_ms) is compute."""
    spin = "spin_kernel(long)"
    trace = {
        "traceEvents": [
            step(1, 0, 300),
            host("user_annotation", COMM_DELAY_RANGE, 10, 20),
            host("cuda_runtime", "cudaLaunchKernel", 12, 14, correlation=41),
            host("cuda_runtime", "cudaLaunchKernel", 30, 32, correlation=42),
            kernel("void at::native::vectorized_elementwise_kernel<4>", 0, 100),
            {**kernel(spin, 80, 180, stream=30), "args": {"correlation": 41}},
            {**kernel(spin, 100, 150), "args": {"correlation": 42}},
        ]
    }
    b = breakdown(trace)
    assert b.comm_events == 1
    assert b.comm_ms == pytest.approx(0.100)  # [80, 180]
    assert b.compute_ms == pytest.approx(0.150)  # [0, 150]
    assert b.exposed_comm_ms == pytest.approx(0.030)  # [150, 180]


def test_the_trace_block_says_when_the_profiler_stretched_the_step():
    block = {"mean": {"step_ms": 62.2}}
    stretched = with_untraced(block, 32.7)
    assert stretched["mean"]["untraced_step_ms"] == 32.7
    assert stretched["mean"]["stretch"] == pytest.approx(62.2 / 32.7)
    assert "stretched the step 1.90x" in stretched["warning"]
    assert "warning" not in with_untraced({"mean": {"step_ms": 33.0}}, 32.7)


def _raster(intervals: list[tuple[float, float]], lo: float, hi: float) -> set[int]:
    """Microsecond ticks covered by the intervals (an independent, brute-force union)."""
    return {t for a, b in intervals for t in range(max(round(a), lo), min(round(b), hi))}


def test_a_real_gloo_trace_agrees_with_a_brute_force_count():
    trace = load_trace(GLOO_TRACE)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in events if re.match(r"ProfilerStep#\d+$", e.get("name", ""))]
    lo = round(min(e["ts"] for e in steps))
    hi = round(max(e["ts"] + e["dur"] for e in steps))
    comm = [e for e in events if e["name"].startswith("gloo:")]
    threads = {e["tid"] for e in comm}
    compute = [e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")
               and e["tid"] not in threads]  # fmt: skip
    comm_ticks = _raster([(e["ts"], e["ts"] + e["dur"]) for e in comm], lo, hi)
    compute_ticks = _raster([(e["ts"], e["ts"] + e["dur"]) for e in compute], lo, hi)
    b = breakdown(trace)
    n = len(steps)
    assert (b.device, b.steps) == ("cpu", n) and n == 5
    assert b.comm_events > 0, "gloo's collectives are in the trace"
    tolerance = 2 * (len(comm) + len(compute)) / n / 1e3  # 1 us of rounding per event edge
    assert b.comm_ms == pytest.approx(len(comm_ticks) / n / 1e3, abs=tolerance)
    assert b.compute_ms == pytest.approx(len(compute_ticks) / n / 1e3, abs=tolerance)
    overlapped = len(comm_ticks & compute_ticks) / n / 1e3
    assert b.overlapped_ms == pytest.approx(overlapped, abs=tolerance)
    parts = b.compute_only_ms + b.overlapped_ms + b.exposed_comm_ms + b.other_ms
    assert parts == pytest.approx(b.step_ms)


def test_a_job_directory_is_analysed_rank_by_rank(tmp_path):
    traces = tmp_path / "traces"
    traces.mkdir()
    for rank in (0, 1):
        with gzip.open(traces / f"rank{rank}.json.gz", "wt") as handle:
            json.dump({**HAND_MADE, "distributedInfo": {"rank": rank}}, handle)
    found = analyse(tmp_path)
    assert [r["rank"] for r in found["ranks"]] == [0, 1]
    assert found["mean"]["overlap_ratio"] == pytest.approx(100 / 150)
    assert analyse(tmp_path / "nothing") is None
