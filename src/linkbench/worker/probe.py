"""Exposed communication inside a DDP training step.

After training, the same step runs ``task.no_sync_steps`` times with gradient
synchronisation and as many times under ``DistributedDataParallel.no_sync()`` (same shapes,
no all-reduce). The difference is the communication the step waits for (what overlap with
the backward pass did not hide). DDP's own running averages of backward communication and
overlap time are recorded beside it, and with them the bus bandwidth the gradient all-reduce
achieved (nccl-tests' definition: bytes x 2(n-1)/n / time). The probe runs after the timed
steps, so it never changes the reported throughput; its no_sync steps leave the ranks'
weights unsynchronised, which no longer matters then.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from linkbench.config.plan import JobPlan
from linkbench.worker.rank import Rank, max_over_ranks
from linkbench.worker.stepper import Stepper
from linkbench.worker.timing import WindowTimer


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
    return timer.lap() / steps


def measure(stepper: Stepper, plan: JobPlan, me: Rank) -> dict[str, Any]:
    """Exposed communication of one step, on every rank; empty when the probe is off.

    DDP's own timings are left out with CUDA graphs: DDP measures them on the host, in
    eager steps only."""
    steps = plan.config.task.no_sync_steps
    if steps <= 0:
        return {}
    ddp_model = stepper.ddp_model
    out: dict[str, Any] = {} if stepper.cuda_graphs else ddp_comm_times(ddp_model)
    synced = _ms_per_step(stepper.synced, steps, me.device)
    local = _ms_per_step(stepper.unsynced, steps, me.device)
    synced = max_over_ranks(synced, me.device)
    local = max_over_ranks(local, me.device)
    exposed = synced - local
    out.update(
        no_sync_steps=steps,
        synced_step_ms=synced,
        compute_step_ms=local,
        comm_exposed_ms=exposed,
        comm_fraction=max(0.0, exposed) / synced,
        grad_bytes=grad_bytes(ddp_model.module),
    )
    wire = plan.config.comm_hook.wire_factor
    n = me.world_size
    if wire is not None:
        out["comm_bytes_per_step"] = out["grad_bytes"] * wire
        if n > 1 and out.get("ddp_backward_comm_ms"):
            seconds = out["ddp_backward_comm_ms"] / 1e3
            out["comm_busbw_gbps"] = out["comm_bytes_per_step"] * 2 * (n - 1) / n / seconds / 1e9
    return out
