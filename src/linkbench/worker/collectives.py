"""``task=allreduce``: collective bandwidth over a sweep of message sizes.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = S / t with S the message bytes
and GB = 1e9 bytes; busbw = algbw x 2(n-1)/n for all_reduce and x (n-1)/n for all_gather and
reduce_scatter, where S is the whole gathered or scattered array. Each size is warmed up, then
``iters`` back-to-back calls are timed with device events (a monotonic clock on CPU); t is the
mean over the calls, averaged over ranks (the slowest rank is recorded too). On an emulated
link a size whose busbw reads above what the link carries (a burst its token bucket let
through at once: the link was idle before it) is marked as a measurement error and left out
of the peak.
"""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from linkbench.config.plan import JobPlan, RunPlan
from linkbench.config.tasks import AllReduceTask
from linkbench.files import COLLECTIVES_CSV, RESULT_FILE
from linkbench.link.bandwidth import bandwidths_gb_s
from linkbench.link.emulated import LinkSpec, above_limit, entered
from linkbench.link.health import health
from linkbench.parts.rank import Rank, max_over_ranks, sum_over_ranks
from linkbench.result import JobResult
from linkbench.worker.board import Board
from linkbench.worker.metric_log import MetricLog
from linkbench.worker.task import Task
from linkbench.worker.timing import WindowTimer

log = logging.getLogger("linkbench")
CSV_COLUMNS = (
    "op",
    "bytes",
    "count",
    "dtype",
    "world_size",
    "time_us",
    "time_us_max",
    "algbw_gb_s",
    "busbw_gb_s",
    "above_limit",
)
ABOVE_MARK = "(above the link)"


def message_sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def _buffers(
    op: str,
    count: int,
    world: int,
    dtype: torch.dtype,
    device: torch.device,
    group: dist.ProcessGroup | None = None,
):
    """The call to time, on preallocated tensors; ``count`` elements in the whole array."""
    if op == "all_reduce":
        tensor = torch.zeros(count, dtype=dtype, device=device)  # sums stay finite
        return lambda: dist.all_reduce(tensor, group=group)
    shard = torch.zeros(count // world, dtype=dtype, device=device)
    full = torch.empty(count // world * world, dtype=dtype, device=device)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(full, shard, group=group)
    return lambda: dist.reduce_scatter_tensor(shard, full, group=group)


def time_collective(
    op: str,
    size_bytes: int,
    dtype_name: str,
    warmup: int,
    iters: int,
    me: Rank,
    group: dist.ProcessGroup | None = None,
) -> dict[str, Any]:
    """One row of the table: ``warmup`` untimed calls, then ``iters`` back-to-back timed ones
    (one window); the mean call time over the ranks gives algbw and busbw. With ``group``
    (every rank calls it, each with its own group: the ranks of its node, say), the groups
    run side by side and the row is their call over the group's size, the time averaged
    over every rank of the world."""
    device = me.device
    world = dist.get_world_size(group) if group is not None else me.world_size
    dtype = getattr(torch, dtype_name)
    element = torch.tensor([], dtype=dtype).element_size()
    count = max(world, size_bytes // element // world * world)
    call = _buffers(op, count, world, dtype, device, group)
    dist.barrier()
    for _ in range(warmup):
        call()
    timer = WindowTimer(device)
    timer.start()
    for _ in range(iters):
        call()
    call_ms = timer.stop() / iters
    mean_ms = sum_over_ranks(call_ms, device) / me.world_size
    max_ms = max_over_ranks(call_ms, device)
    actual_bytes = count * element
    algbw, busbw = bandwidths_gb_s(op, actual_bytes, mean_ms / 1e3, world)
    return {
        "op": op,
        "bytes": actual_bytes,
        "count": count,
        "dtype": dtype_name,
        "world_size": world,
        "time_us": mean_ms * 1e3,
        "time_us_max": max_ms * 1e3,
        "algbw_gb_s": algbw,
        "busbw_gb_s": busbw,
    }


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'op':>15} {'bytes':>12} {'time_us':>11} {'algbw GB/s':>11} {'busbw GB/s':>11}"]
    for r in rows:
        lines.append(
            f"{r['op']:>15} {r['bytes']:>12,} {r['time_us']:>11.1f} "
            f"{r['algbw_gb_s']:>11.3f} {r['busbw_gb_s']:>11.3f}"
            + (f"  {ABOVE_MARK}" if r.get("above_limit") else "")
        )
    if any(r.get("above_limit") for r in rows):
        lines.append(
            f"{ABOVE_MARK} above what the emulated link carries: a measurement error (a burst "
            "the token bucket let through at once), left out of the peak"
        )
    return "\n".join(lines)


def mark_above_limit(rows: list[dict[str, Any]], spec: LinkSpec | None) -> None:
    """On an emulated link (``spec``), ``above_limit`` in each row: whether its busbw reads
    above what the link carries (:func:`linkbench.link.emulated.above_limit`)."""
    if spec is None:
        return
    for row in rows:
        row["above_limit"] = above_limit(spec, row["busbw_gb_s"], "busbw") is not None


def peak(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row of the highest busbw (the larger size on a tie), among those not above the
    link's limit where any are."""
    within = [r for r in rows if not r.get("above_limit")] or rows
    return max(within, key=lambda r: (r["busbw_gb_s"], r["bytes"]))


class AllReduce(Task):
    """``task=allreduce`` at run time (its option:
    :class:`linkbench.config.tasks.AllReduceTask`)."""

    @classmethod
    def run(cls, plan: RunPlan, me: Rank, board: Board | None) -> dict[str, Any]:
        """Time every op at every size; rank 0 (``board`` given) writes CSV and TensorBoard."""
        task = plan.config.task
        assert isinstance(task, AllReduceTask) and task.max_bytes is not None  # planned
        world = me.world_size
        rows = []
        for op in map(str, task.ops):
            for size in message_sizes(task.min_bytes, task.max_bytes, task.size_factor):
                row = time_collective(op, size, task.dtype, task.warmup_iters, task.iters, me)
                rows.append(row)
                if board is not None:
                    step = round(math.log2(row["bytes"]))
                    board.scalars(
                        step,
                        {
                            f"collectives/{op}/busbw_gb_s": row["busbw_gb_s"],
                            f"collectives/{op}/algbw_gb_s": row["algbw_gb_s"],
                            f"collectives/{op}/time_us": row["time_us"],
                        },
                    )
        if board is None:
            return {}
        mark_above_limit(rows, entered())
        with (Path(plan.job_dir) / COLLECTIVES_CSV).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        log.info("collective bandwidth, %d ranks (step in TensorBoard = log2 bytes):\n%s", world,
                 format_table(rows))  # fmt: skip
        if world == 1:
            log.warning(
                "one rank: collectives move no data between GPUs, so busbw is 0 by definition and "
                "algbw times a local copy (or nothing, for the in-place all_reduce)."
            )
        headline = [r for r in rows if r["op"] == str(task.ops[0])]
        best = peak(headline)
        MetricLog.of(board).log(0, {"busbw_gb_s_peak": best["busbw_gb_s"]})
        metrics = {
            "busbw_gb_s_peak": best["busbw_gb_s"],
            "algbw_gb_s_at_peak": best["algbw_gb_s"],
            "peak_op": best["op"],
            "peak_bytes": best["bytes"],
        }
        return {"metrics": metrics, "collectives": rows}

    @classmethod
    def finish(cls, fields: JobResult, plan: JobPlan, hardware: dict[str, Any]) -> None:
        """The link's health: the peak busbw against what this interconnect should reach."""
        peak = fields["metrics"].get("busbw_gb_s_peak")
        if peak is not None:
            fields["health"] = health(
                peak, plan.world_size, str(plan.config.interconnect.name),
                str(plan.config.interconnect.expected_transport), hardware.get("topology") or {},
            )  # fmt: skip

    @classmethod
    def report(cls, result: JobResult) -> None:
        metrics = result["metrics"]
        log.info(
            "done: peak %s busbw %.2f GB/s at %s bytes -> %s",
            metrics["peak_op"], metrics["busbw_gb_s_peak"], f"{metrics['peak_bytes']:,}",
            Path(result["job_dir"]) / RESULT_FILE,
        )  # fmt: skip
        if "health" in result:
            log.info("health: %s", result["health"]["line"])
