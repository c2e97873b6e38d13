"""Exposed communication inside a DDP training step.

After training, the same step runs ``task.no_sync_steps`` times with gradient
synchronisation and as many times under ``DistributedDataParallel.no_sync()`` (same shapes,
no all-reduce). The difference is the communication the step waits for (what overlap with
the backward pass did not hide). DDP's own running averages of backward communication and
overlap time are recorded beside it, and with them a lower bound of the bus bandwidth the
gradient all-reduce achieved (nccl-tests' definition, bytes x 2(n-1)/n / time, over DDP's
communication time, which includes waiting for the backward pass). The probe runs after the timed
steps, so it never changes the reported throughput; its no_sync steps leave the ranks'
weights unsynchronised, which no longer matters then.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from linkbench.config.plan import JobPlan
from linkbench.parts.strategy import DataParallel
from linkbench.worker.rank import Rank
from linkbench.worker.stepper import Stepper
from linkbench.worker.timing import WindowTimer

log = logging.getLogger("linkbench")


def grad_bytes(model: nn.Module) -> int:
    """Bytes of the gradients DDP all-reduces each step (shared parameters counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def ddp_comm_times(ddp_model: DistributedDataParallel) -> dict[str, float]:
    """DDP's sampled averages of backward communication and its overlap, in milliseconds."""
    data = ddp_model._get_ddp_logging_data()
    names = {
        "avg_backward_comm_time": "ddp_backward_comm_ms",
        "avg_backward_compute_comm_overlap_time": "ddp_comm_overlap_ms",
        "avg_backward_compute_time": "ddp_backward_compute_ms",
    }
    return {ours: data[theirs] / 1e6 for theirs, ours in names.items() if data.get(theirs)}


def _ms_per_step(step: Callable[[], Any], steps: int, device: torch.device) -> float:
    step()  # untimed: the first step after a switch pays for it
    timer = WindowTimer(device)
    timer.start()
    for _ in range(steps):
        step()
    return timer.stop() / steps


def measure(stepper: Stepper, plan: JobPlan, me: Rank) -> dict[str, Any]:
    """Exposed communication of one step; empty when the probe is off.

    Each rank times its own synced and no_sync steps; the figures reported are those of the
    rank whose synced step was slowest, so both measurements of the difference come from
    one rank. A negative difference (no_sync steps slower than synced ones: noise larger
    than the exposed communication) is reported as measured, with a note. DDP's own timings
    are left out with CUDA graphs: DDP measures them on the host, in eager steps only."""
    steps = plan.config.task.no_sync_steps
    if steps <= 0:
        return {}
    parallel = stepper.parallel
    out: dict[str, Any] = {}
    if isinstance(parallel, DataParallel) and not stepper.cuda_graphs:
        out.update(ddp_comm_times(parallel.ddp))
    mine = (
        _ms_per_step(stepper.synced, steps, me.device),
        _ms_per_step(stepper.unsynced, steps, me.device),
    )
    everyone: list[Any] = [None] * me.world_size
    dist.all_gather_object(everyone, mine)
    synced, unsynced = max(everyone, key=lambda pair: pair[0])
    exposed = synced - unsynced
    out.update(
        no_sync_steps=steps,
        synced_step_ms=synced,
        compute_step_ms=unsynced,
        comm_exposed_ms=exposed,
        comm_fraction=exposed / synced,
        grad_bytes=grad_bytes(parallel.module),
    )
    if exposed < 0:
        out["comm_exposed_note"] = (
            f"negative: the no_sync steps took {-exposed:.3f} ms longer than the synced ones on "
            "the same rank, so the exposed communication is below this probe's noise; raise "
            "task.no_sync_steps for a finer measurement"
        )
        log.warning("exposed communication %s", out["comm_exposed_note"])
    n = me.world_size
    if moved := parallel.comm_bytes(plan.config):
        out["comm_bytes"] = moved
        out["comm_messages"] = parallel.messages(plan.config)
        out["comm_bytes_per_step"] = sum(moved.values())
        if n > 1 and out.get("ddp_backward_comm_ms") and set(moved) == {"all_reduce"}:
            # DDP's communication time spans each bucket's launch to its completion, waits
            # for the backward pass included: the link moved the bytes at least this fast.
            seconds = out["ddp_backward_comm_ms"] / 1e3
            busbw = out["comm_bytes_per_step"] * 2 * (n - 1) / n / seconds / 1e9
            out["comm_busbw_lower_bound_gbps"] = busbw
    return out
