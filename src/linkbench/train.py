"""``task=train``: the DDP training loop of one rank, with honest step timing.

The hot loop never waits on the device except every ``log_every`` steps, where the timing
window closes, the loss is all-reduced across ranks and rank 0 logs. The first
``warmup_steps`` are not timed. At the end the timed milliseconds are all-reduced with MAX,
so the reported throughput is the slowest rank's. Then a probe times the same step with and
without gradient synchronisation (:mod:`linkbench.comm`) to measure exposed communication.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR

from linkbench import comm, ddp, precision
from linkbench.data import make_batches
from linkbench.models import build_model, loss_fn
from linkbench.optim import build_optimizer, build_schedule
from linkbench.plan import JobPlan
from linkbench.rank import Rank, max_over_ranks, sum_over_ranks
from linkbench.results import METRICS_FILE, write_json
from linkbench.tensorboard_log import Board
from linkbench.timing import WindowTimer

log = logging.getLogger("linkbench")


@dataclass
class Window:
    """A closed timing window: how many steps and how long they took."""

    steps: int
    ms: float

    @property
    def step_ms(self) -> float:
        return self.ms / self.steps


def summarize(plan: JobPlan, windows: list[Window], timed_ms: float, final_loss: float) -> dict:
    """Throughput and step-time statistics of the timed steps."""
    timed_steps = sum(w.steps for w in windows)
    metrics: dict[str, Any] = {"final_loss": final_loss, "timed_steps": timed_steps}
    if timed_steps == 0:
        return metrics
    samples_per_sec = plan.global_batch * timed_steps / (timed_ms / 1e3)
    per_window = [w.step_ms for w in windows]
    metrics.update(
        samples_per_sec=samples_per_sec,
        samples_per_sec_per_device=samples_per_sec / plan.world_size,
        step_time_ms=timed_ms / timed_steps,
        step_time_ms_median=statistics.median(per_window),
        step_time_ms_min=min(per_window),
        step_time_ms_max=max(per_window),
        timing_windows=len(windows),
    )
    return metrics


def _build(plan: JobPlan, me: Rank) -> tuple[DistributedDataParallel, Callable, LambdaLR]:
    """The DDP model, a function running one training step (returning its loss), the schedule."""
    cfg, device = plan.config, me.device
    torch.manual_seed(cfg["seed"])
    precision.configure_tf32(plan.precision == "tf32")
    batches = make_batches(cfg, cfg["batch"], device, me.rank, me.world_size, me.local_rank)
    model = build_model(cfg["model"], cfg["data"]["image_size"], batches.num_classes).to(device)
    if cfg["model"]["channels_last"] and device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    ddp_model = ddp.wrap(model, cfg["ddp"], device)
    ddp_model._set_ddp_runtime_logging_sample_rate(cfg["log_every"])
    optimizer = build_optimizer(ddp_model, cfg["model"], plan.lr, device)
    schedule = build_schedule(optimizer, cfg["scaling"]["lr_warmup_steps"])
    scaler = precision.grad_scaler(cfg["precision"], device)

    def step() -> torch.Tensor:
        inputs, targets = next(batches.stream)
        with precision.autocast(cfg["precision"], device):
            loss = loss_fn(ddp_model(inputs), targets)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        schedule.step()
        return loss.detach()

    return ddp_model, step, schedule


def train(plan: JobPlan, me: Rank, board: Board | None) -> dict[str, Any]:
    """Run the job's steps on this rank; rank 0 returns the job's metrics."""
    cfg, device = plan.config, me.device
    steps, warmup, log_every = cfg["steps"], cfg["warmup_steps"], cfg["log_every"]
    ddp_model, step, schedule = _build(plan, me)
    timer = WindowTimer(device)
    windows: list[Window] = []
    loss_sum = torch.zeros((), device=device)
    loss_count, window_start, mean_loss = 0, warmup, float("nan")
    if warmup == 0:
        timer.start()
    log.info(
        "training %s on %d x %s (%s, %s), global batch %d, lr %.4g",
        cfg["model"]["name"], me.world_size, device.type, plan.backend, plan.precision,
        plan.global_batch, plan.lr,
    )  # fmt: skip
    for done in range(1, steps + 1):
        lr = schedule.get_last_lr()[0]
        loss_sum += step().float()
        loss_count += 1
        if done == warmup:
            timer.start()
        if done % log_every and done != steps:
            continue
        scalars = {"train/lr": lr}
        if done > warmup:
            window = Window(done - window_start, timer.lap())
            windows.append(window)
            window_start = done
            scalars["perf/step_time_ms"] = window.step_ms
            scalars["perf/samples_per_sec"] = plan.global_batch / (window.step_ms / 1e3)
            scalars["perf/samples_per_sec_per_device"] = cfg["batch"] / (window.step_ms / 1e3)
        mean_loss = sum_over_ranks(loss_sum, device) / (loss_count * me.world_size)
        scalars["train/loss"] = mean_loss
        loss_sum.zero_()
        loss_count = 0
        if device.type == "cuda":
            scalars["mem/max_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
        if board is not None:
            board.scalars(done, scalars)
            _log_progress(done, steps, scalars)
            partial = summarize(plan, windows, sum(w.ms for w in windows), mean_loss)
            write_json(Path(plan.job_dir) / METRICS_FILE, {"step": done, "metrics": partial})
    timed_ms = max_over_ranks(sum(w.ms for w in windows), device)
    metrics = summarize(plan, windows, timed_ms, mean_loss)
    metrics.update(comm.measure(ddp_model, step, plan, me))
    if board is None:
        return {}
    if "comm_exposed_ms" in metrics:
        board.scalars(
            steps,
            {
                "perf/comm_exposed_ms": metrics["comm_exposed_ms"],
                "perf/comm_fraction": metrics["comm_fraction"],
                "perf/compute_step_ms": metrics["compute_step_ms"],
            },
        )
    if device.type == "cuda":
        metrics["max_allocated_gb"] = torch.cuda.max_memory_allocated(device) / 1e9
    metrics["lr"] = plan.lr
    return {"metrics": metrics}


def _log_progress(done: int, steps: int, scalars: dict[str, float]) -> None:
    line = f"step {done}/{steps}  loss {scalars['train/loss']:.4f}  lr {scalars['train/lr']:.4g}"
    if "perf/samples_per_sec" in scalars:
        line += (
            f"  {scalars['perf/samples_per_sec']:,.1f} samples/s"
            f"  {scalars['perf/step_time_ms']:.2f} ms/step"
        )
    log.info(line)
