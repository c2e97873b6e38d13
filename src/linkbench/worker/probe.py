"""Exposed communication inside a DDP training step.

After training, the same step runs ``task.no_sync_steps`` times with gradient
synchronisation and as many times under ``DistributedDataParallel.no_sync()`` (same shapes,
no all-reduce), in up to five pairs of alternating windows. The difference is the
communication the step waits for (what overlap with the backward pass did not hide); the
pairs give it a 95 % interval, and one that holds 0 is reported as below the probe's noise.
DDP's own running averages of backward communication and overlap time are recorded beside
it, and with them a lower bound of the bus bandwidth the gradient all-reduce achieved (nccl-
tests' definition, bytes x 2(n-1)/n / time, over DDP's communication time, which includes
waiting for the backward pass). The probe runs after the timed steps, so it never changes
the reported throughput; its no_sync steps leave the ranks' weights unsynchronised, which no
longer matters then.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from linkbench.analysis.stats import mean_interval
from linkbench.config.plan import RunPlan
from linkbench.config.tasks import TrainTask
from linkbench.metrics import noise_note
from linkbench.parts.rank import Rank
from linkbench.worker.stepper import Stepper
from linkbench.worker.timing import WindowTimer

log = logging.getLogger("linkbench")
# Pairs of alternating synced and no_sync windows the probe's steps are split into.
PROBE_WINDOWS = 5


def grad_bytes(model: nn.Module) -> int:
    """Bytes of the gradients DDP all-reduces each step (shared parameters counted once)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def _ms_per_step(step: Callable[[], Any], steps: int, device: torch.device) -> float:
    step()  # untimed: the first step after a switch pays for it
    timer = WindowTimer(device)
    timer.start()
    for _ in range(steps):
        step()
    return timer.stop() / steps


def window_sizes(steps: int, windows: int = PROBE_WINDOWS) -> list[int]:
    """``steps`` timed steps of each kind split into up to ``windows`` windows."""
    count = min(windows, steps)
    return [steps // count + (i < steps % count) for i in range(count)]


def exposed_interval(pairs: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(mean, low, high) of synced minus no_sync milliseconds per step over the windows'
    pairs, with a 95 % t-interval (low = high = mean for one pair)."""
    found = mean_interval([synced - unsynced for synced, unsynced in pairs], geometric=False)
    return found.mean, found.low, found.high


def _alternating_windows(stepper: Stepper, steps: int, device: torch.device) -> list[Any]:
    """(synced, no_sync) milliseconds per step of each window pair; the kind that goes first
    alternates from pair to pair, so a drift inside a pair favours neither."""
    pairs = []
    for i, size in enumerate(window_sizes(steps)):
        kinds = (stepper.synced, stepper.unsynced)
        first, second = kinds if i % 2 == 0 else kinds[::-1]
        times = (_ms_per_step(first, size, device), _ms_per_step(second, size, device))
        pairs.append(times if i % 2 == 0 else times[::-1])
    return pairs


def measure(stepper: Stepper, plan: RunPlan, me: Rank) -> dict[str, Any]:
    """Exposed communication of one step, with its spread, beside the step's communication
    as counted (:func:`traffic`); empty when the probe is off, and with one rank, which has
    no link (what it would measure is DDP's own bucket work), unless ``debug.comm_delay_ms``
    injects communication for the probe to find. The timed windows describe a configuration
    and no verdict reads them, so they run in the configuration's first run only
    (:attr:`RunPlan.describes`: a sweep's round 0, a job's first repeat), except where a
    delay is injected to calibrate them; every run counts its traffic.

    Each rank times its synced and no_sync steps in alternating windows; the figures
    reported are those of the rank whose synced steps were slowest, so every difference
    comes from one rank. ``comm_exposed_ms`` is the mean over the windows' pairs, with a
    95 % interval (``comm_exposed_ms_low`` / ``_high``); an interval that holds 0 means the
    exposed communication is below this probe's noise, and the record says so. With
    ``debug.comm_delay_ms`` the injected delay per synced step is recorded
    (``comm_delay_injected_ms``): the exposed communication lies between 0 and it."""
    task = plan.config.task
    steps = task.no_sync_steps if isinstance(task, TrainTask) else 0
    injected = bool(plan.config.debug.comm_delay_ms)
    if steps <= 0 or (me.world_size == 1 and not injected):
        return {}  # off, or one rank: no link, so no communication (unless one is injected)
    out = traffic(stepper, plan, me)
    if not plan.describes and not injected:
        return out  # a configuration's first run timed it: no verdict reads it
    parallel = stepper.parallel
    delay = parallel.comm_delay
    delayed_before = delay.buckets if delay else 0
    mine = _alternating_windows(stepper, steps, me.device)
    everyone: list[Any] = [None] * me.world_size
    dist.all_gather_object(everyone, mine)
    pairs = max(everyone, key=lambda p: statistics.fmean(s for s, _ in p))
    exposed, low, high = exposed_interval(pairs)
    synced = statistics.fmean(s for s, _ in pairs)
    out.update(
        no_sync_steps=steps,
        synced_step_ms=synced,
        compute_step_ms=statistics.fmean(u for _, u in pairs),
        comm_exposed_ms=exposed,
        comm_exposed_ms_low=low,
        comm_exposed_ms_high=high,
        comm_exposed_windows=len(pairs),
        comm_fraction=exposed / synced,
    )
    if delay is not None:
        synced_steps = sum(window_sizes(steps)) + len(pairs)  # the untimed ones delay too
        buckets = (delay.buckets - delayed_before) / synced_steps
        out.update(comm_delay_buckets=buckets, comm_delay_injected_ms=buckets * delay.ms)
    if note := noise_note(exposed, low, high, len(pairs)):
        out["comm_exposed_note"] = note
        log.warning("exposed communication %s", note)
    return out


def traffic(stepper: Stepper, plan: RunPlan, me: Rank) -> dict[str, Any]:
    """The step's communication as counted and as DDP timed it in the training steps, which
    costs no step: the gradients' bytes, each collective's bytes and messages, DDP's own
    averages of backward communication and overlap (left out with CUDA graphs: DDP measures
    them on the host, in eager steps only), and with two ranks or more the bus bandwidth
    they bound from below."""
    parallel = stepper.parallel
    out: dict[str, Any] = {**parallel.comm_times(), "grad_bytes": grad_bytes(parallel.module)}
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
            out["comm_busbw_lower_bound_gb_s"] = busbw
    return out
