"""``task=links``: the link matrix, nvbandwidth's core measurements from PyTorch.

Rank 0 measures, over every GPU its process sees (the other ranks wait):

- ``h2d`` and ``d2h``: pinned host memory to each GPU and back;
- ``local``: a copy inside each GPU's own memory;
- ``p2p``: GPU i to GPU j for every ordered pair, a device-to-device copy with peer access
  where the pair has it (the NVLink path where present);
- ``staged``: GPU i to pinned host memory to GPU j, the path ``interconnect=pcie`` forces;
- ``p2p_bidir`` and ``staged_bidir``: both directions of a pair at once (bytes of both).

Each copy of each size (``task.sizes_mb``) is warmed up (``task.warmup_iters``), then
``task.iters`` copies are timed back to back between synchronisations of every device
involved; bandwidth is bytes / time in GB/s (1e9 bytes). The largest size gives the matrix.
A pair far below the others (under half their median) is flagged in one line. With one GPU
there are no pairs, and the result says so; on CPU the plan refuses the task.
"""

from __future__ import annotations

import csv
import logging
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from linkbench.config.plan import RunPlan
from linkbench.config.tasks import LinksTask
from linkbench.files import LINKS_CSV, RESULT_FILE
from linkbench.parts.rank import Rank
from linkbench.result import JobResult
from linkbench.worker.board import Board
from linkbench.worker.task import Task

log = logging.getLogger("linkbench")
MIB = 1 << 20
SLOW_PAIR_SHARE = 0.5  # a pair under this share of the pairs' median is flagged
PAIR_KINDS = ("p2p", "staged", "p2p_bidir", "staged_bidir")


def _seconds_per_call(
    call: Callable[[], Any], devices: list[int], warmup: int, iters: int
) -> float:
    def sync() -> None:
        for d in devices:
            torch.cuda.synchronize(d)

    for _ in range(warmup):
        call()
    sync()
    started = time.perf_counter()
    for _ in range(iters):
        call()
    sync()
    return (time.perf_counter() - started) / iters


Copy = tuple[str, int, int, Callable[[], Any], int]


def _copies(size: int, gpus: int) -> list[Copy]:
    """(kind, source, destination, the copy, bytes it moves); -1 is host memory."""
    count = size // 4
    host = [torch.empty(count, dtype=torch.float32, pin_memory=True) for _ in range(2)]
    on = [torch.ones(count, device=f"cuda:{g}") for g in range(gpus)]
    into = [torch.empty(count, device=f"cuda:{g}") for g in range(gpus)]
    back = [torch.empty(count, device=f"cuda:{g}") for g in range(gpus)]
    streams = [torch.cuda.Stream(g) for g in range(gpus)]
    out: list[Copy] = []
    for g in range(gpus):
        out += [
            ("h2d", -1, g, partial(into[g].copy_, host[0], non_blocking=True), size),
            ("d2h", g, -1, partial(host[0].copy_, on[g], non_blocking=True), size),
            ("local", g, g, partial(into[g].copy_, on[g]), size),
        ]

    def p2p(i: int, j: int) -> None:
        into[j].copy_(on[i], non_blocking=True)

    def p2p_bidir(i: int, j: int) -> None:
        with torch.cuda.stream(streams[j]):
            into[j].copy_(on[i], non_blocking=True)
        with torch.cuda.stream(streams[i]):
            back[i].copy_(on[j], non_blocking=True)

    def staged(i: int, j: int) -> None:
        host[0].copy_(on[i], non_blocking=True)
        torch.cuda.synchronize(i)
        into[j].copy_(host[0], non_blocking=True)

    def staged_bidir(i: int, j: int) -> None:
        with torch.cuda.stream(streams[i]):
            host[0].copy_(on[i], non_blocking=True)
        with torch.cuda.stream(streams[j]):
            host[1].copy_(on[j], non_blocking=True)
        torch.cuda.synchronize(i)
        torch.cuda.synchronize(j)
        with torch.cuda.stream(streams[j]):
            into[j].copy_(host[0], non_blocking=True)
        with torch.cuda.stream(streams[i]):
            back[i].copy_(host[1], non_blocking=True)

    for i in range(gpus):
        for j in range(gpus):
            if i != j:
                out += [
                    ("p2p", i, j, partial(p2p, i, j), size),
                    ("staged", i, j, partial(staged, i, j), size),
                    ("p2p_bidir", i, j, partial(p2p_bidir, i, j), 2 * size),
                    ("staged_bidir", i, j, partial(staged_bidir, i, j), 2 * size),
                ]
    return out


def measure_links(sizes_mb: list[int], warmup: int, iters: int) -> list[dict[str, Any]]:
    """Every copy of every size on the GPUs this process sees."""
    gpus = torch.cuda.device_count()
    rows = []
    for size_mb in sizes_mb:
        for kind, src, dst, call, moved in _copies(size_mb * MIB, gpus):
            devices = sorted({d for d in (src, dst) if d >= 0})
            seconds = _seconds_per_call(call, devices, warmup, iters)
            rows.append(
                {
                    "kind": kind,
                    "src": src,
                    "dst": dst,
                    "bytes": moved,
                    "size_mb": size_mb,
                    "time_us": seconds * 1e6,
                    "gb_s": moved / seconds / 1e9,
                }
            )
    return rows


def slow_pairs(rows: list[dict[str, Any]], kind: str = "p2p") -> list[str]:
    """One line per pair far below the others' median at the largest size."""
    largest = max(r["size_mb"] for r in rows)
    pairs = [r for r in rows if r["kind"] == kind and r["size_mb"] == largest]
    if len(pairs) < 3:
        return []
    median = statistics.median(r["gb_s"] for r in pairs)
    return [
        f"GPU {r['src']} -> GPU {r['dst']}: {r['gb_s']:.1f} GB/s, under {SLOW_PAIR_SHARE:.0%} of "
        f"the pairs' median {median:.1f} GB/s: check this pair's link (nvidia-smi topo -m)"
        for r in pairs
        if r["gb_s"] < SLOW_PAIR_SHARE * median
    ]


def matrix(rows: list[dict[str, Any]], kind: str) -> list[list[float | None]]:
    """GB/s of ``kind`` between every ordered pair at the largest size (None on the diagonal)."""
    largest = max(r["size_mb"] for r in rows)
    gpus = 1 + max(max(r["src"], r["dst"]) for r in rows)
    grid: list[list[float | None]] = [[None] * gpus for _ in range(gpus)]
    for r in rows:
        if r["kind"] == kind and r["size_mb"] == largest:
            grid[r["src"]][r["dst"]] = r["gb_s"]
    return grid


def format_table(rows: list[dict[str, Any]]) -> str:
    largest = max(r["size_mb"] for r in rows)
    lines = [f"{'copy':>13} {'from':>5} {'to':>5} {'GB/s':>9}   ({largest} MiB)"]
    for r in rows:
        if r["size_mb"] == largest:
            where = {-1: "host"}
            lines.append(
                f"{r['kind']:>13} {where.get(r['src'], r['src']):>5} "
                f"{where.get(r['dst'], r['dst']):>5} {r['gb_s']:>9.1f}"
            )
    return "\n".join(lines)


class Links(Task):
    """``task=links`` at run time (its option: :class:`linkbench.config.tasks.LinksTask`)."""

    @classmethod
    def run(cls, plan: RunPlan, me: Rank, board: Board | None) -> dict[str, Any]:
        """``task=links`` on rank 0 over every visible GPU; the other ranks wait."""
        task = plan.config.task
        assert isinstance(task, LinksTask)
        sizes = list(task.sizes_mb)
        rows = measure_links(sizes, task.warmup_iters, task.iters) if me.is_main else []
        dist.barrier()
        if board is None:
            return {}
        with (Path(plan.job_dir) / LINKS_CSV).open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        log.info("link bandwidth, GB/s (1e9 bytes):\n%s", format_table(rows))
        gpus = torch.cuda.device_count()
        notes = [] if gpus > 1 else ["one GPU: pairs need two GPUs; host copies and on-device only"]
        notes += slow_pairs(rows)
        for note in notes:
            log.warning(note)
        largest = max(r["size_mb"] for r in rows)
        for r in rows:
            if r["size_mb"] == largest:
                board.scalars(0, {f"links/{r['kind']}/{r['src']}_to_{r['dst']}_gb_s": r["gb_s"]})
        host = [r for r in rows if r["kind"] == "h2d" and r["size_mb"] == largest]
        metrics = {"host_to_device_gb_s": max(r["gb_s"] for r in host), "gpus": gpus}
        matrices = {k: matrix(rows, k) for k in PAIR_KINDS if any(r["kind"] == k for r in rows)}
        from linkbench.analysis.plots import plot_link_matrices  # matplotlib: rank 0 only

        plot_link_matrices(Path(plan.job_dir), matrices)
        return {"metrics": metrics, "links": {"rows": rows, "matrices": matrices, "notes": notes}}

    @classmethod
    def report(cls, result: JobResult) -> None:
        metrics = result["metrics"]
        log.info(
            "done: host to GPU %.1f GB/s over %d GPU(s) -> %s",
            metrics["host_to_device_gb_s"], metrics["gpus"], Path(result["job_dir"]) / RESULT_FILE,
        )  # fmt: skip
