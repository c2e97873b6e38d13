"""``task=train``: the DDP training loop of one rank, with honest step timing.

The hot loop never waits on the device except every ``log_every`` steps, where the timing
window closes, the loss is all-reduced across ranks, rank 0 logs, every rank meets at a
barrier and a new window opens: the logging step's host work is in no window. The first
``untimed_steps`` are not timed. At the end the timed milliseconds are all-reduced with MAX,
so the reported throughput is the slowest rank's, and with it the model FLOPs utilisation
(:mod:`linkbench.parts.flops`). Then a probe times the same step with and without gradient
synchronisation (:mod:`linkbench.worker.probe`) to measure exposed communication. How a
step executes (eager, torch.compile, CUDA graphs) is :mod:`linkbench.worker.stepper`'s
business.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from linkbench.config.choices import PrecisionName
from linkbench.config.plan import RunPlan
from linkbench.config.schema import Config
from linkbench.files import METRICS_FILE, RESULT_FILE, write_json
from linkbench.link.crossing import PREDICTED_BACKENDS, attach, node_bytes, uplink_bytes
from linkbench.metrics import honest, probe_mark
from linkbench.parts import precision
from linkbench.parts.data import Batches, make_batches
from linkbench.parts.flops import FlopRate, peak_tflops
from linkbench.parts.models import build_model, materialize
from linkbench.parts.rank import Rank, max_over_ranks, sum_over_ranks
from linkbench.result import JobResult
from linkbench.worker import checkpoint, heartbeat, phases, probe
from linkbench.worker.board import Board
from linkbench.worker.compile_cache import cache_counters, use_cache
from linkbench.worker.counters import CounterSampler, combine
from linkbench.worker.emulated import UplinkCounter
from linkbench.worker.evaluate import evaluate
from linkbench.worker.metric_log import MetricLog
from linkbench.worker.profiling import record_trace
from linkbench.worker.stepper import Stepper
from linkbench.worker.task import Task
from linkbench.worker.timing import WindowTimer

log = logging.getLogger("linkbench")
# A job projected to run longer than this after its first step says so at once.
LONG_JOB_S = 60.0


@dataclass
class Window:
    """A closed timing window: how many steps and how long they took."""

    steps: int
    ms: float

    @property
    def step_ms(self) -> float:
        return self.ms / self.steps


def summarize(
    plan: RunPlan,
    windows: list[Window],
    timed_ms: float,
    final_loss: float,
    flops: FlopRate | None = None,
    epoch_samples: int | None = None,
) -> dict:
    """Throughput, step-time statistics and (where FLOPs are known) MFU of the timed steps."""
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
    if flops is not None:
        metrics.update(flops.metrics(samples_per_sec / plan.world_size))
    if epoch_samples:
        metrics.update(epoch_samples=epoch_samples, epoch_time_s=epoch_samples / samples_per_sec)
    return metrics


def _build(plan: RunPlan, me: Rank) -> tuple[Stepper, Batches, int, FlopRate | None]:
    """The rank's model in its execution mode, its batches, the step it starts after (0, or
    the checkpoint's when resuming); rank 0 also gets the FLOPs of a sample."""
    cfg, device = plan.config, me.device
    torch.manual_seed(cfg.seed)
    precision.configure_tf32(plan.precision == PrecisionName.tf32)
    torch.backends.cudnn.benchmark = plan.cudnn_benchmark
    batches = make_batches(plan, cfg.batch, me)
    model = build_model(cfg.model, cfg.data.num_classes).to(device)
    model = materialize(model, cfg.model, cfg.data.image_size)
    if cfg.model.channels_last and device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    stepper = Stepper(plan, model, batches.stream, device)
    first = 0
    if plan.resume_step is not None:  # before the stream's first batch: it starts there
        first = checkpoint.restore(Path(plan.job_dir), stepper, batches.position, me)
        log.info("resumed from the checkpoint of step %d", first)
    flops = None
    if me.is_main and plan.flops_per_sample:
        flops = FlopRate(plan.flops_per_sample, peak_tflops(device, plan.precision))
    return stepper, batches, first, flops


class TrainingRun:
    """One rank's pass over the job's steps: timing windows, logging steps, checkpoints."""

    def __init__(self, plan: RunPlan, me: Rank, board: Board | None) -> None:
        self.plan, self.me, self.board = plan, me, board
        self.metric_log = MetricLog.of(board, plan.steps) if board is not None else None
        self.cfg = plan.config
        self.compile_cache = use_cache(plan.compile_cache_dir) if self.cfg.compile else None
        self.stepper, self.batches, self.first, self.flops = _build(plan, me)
        # The last untimed step: the untimed steps count again after a resume.
        self.timed_from = self.first + plan.untimed_steps
        self.timer = WindowTimer(me.device)
        self.windows: list[Window] = []
        self.window_start = self.timed_from
        self.loss_sum = torch.zeros((), device=me.device)
        self.loss_count = 0
        self.mean_loss = float("nan")
        self.first_step_s: float | None = None
        self.timeline: dict[str, float] = {}
        self.counters = CounterSampler(me.device, self.cfg.hw_sample_hz)
        self.uplink = UplinkCounter(plan.link)
        self.uplinks: list[dict[str, Any]] | None = None
        phases.mark("set_up")

    def run(self) -> None:
        """Every step from the first (or the checkpoint's next) to ``steps``."""
        cfg, me = self.cfg, self.me
        steps, log_every = self.plan.steps, cfg.log_every
        every = cfg.checkpoint.every_steps
        every_eval = cfg.eval.every_steps if evaluates(self.plan) else 0
        chosen = me.rank == cfg.debug.crash_rank
        crash_at = cfg.debug.crash_at_step if chosen else None
        hang_at = cfg.debug.hang_at_step if chosen else None
        if self.timed_from == self.first:
            self.counters.start()
            self.uplink.start()
            self.timer.start()
        started = time.perf_counter()
        for done in range(self.first + 1, steps + 1):
            heartbeat.at_step(done)
            if done == crash_at:
                raise RuntimeError(f"debug.crash_at_step={done}: rank {me.rank} raises on purpose")
            if done == hang_at:
                log.warning("debug.hang_at_step=%d: rank %d stops itself (SIGSTOP)", done, me.rank)
                os.kill(os.getpid(), signal.SIGSTOP)
            self.loss_sum += self.stepper.synced().float()
            self.loss_count += 1
            if done == self.first + 1 and self.timed_from > self.first:
                # Untimed, so waiting here costs the measurement nothing; with compile=true or
                # cuda_graphs=true this step holds the compilation or the eager DDP start.
                _wait_for(me.device)
                self.first_step_s = time.perf_counter() - started
                self.timeline["first_step_done_at"] = time.time()
                phases.mark("first_step")
                if self.board is not None:
                    _say_if_long(self.first_step_s, done, steps, log_every)
            if done == self.timed_from:
                phases.mark("untimed_steps")
                self.counters.start()
                self.uplink.start()
                self.timer.start()
            if done % log_every == 0 or done == steps:
                self._log_step(done)
                if every_eval and done % every_eval == 0 and done < steps:
                    self.evaluate(done)
                if every and done % every == 0 and done < steps:
                    position = self.batches.position
                    checkpoint.save(Path(self.plan.job_dir), self.stepper, done, position, me)
                if self.timed_from <= done < steps:
                    dist.barrier()  # every rank's host work is done: the next window opens
                    self.timer.start()

    def _log_step(self, done: int) -> None:
        """Close the timing window, check and all-reduce the loss, log (rank 0)."""
        plan, cfg, me = self.plan, self.cfg, self.me
        values = {"lr": plan.lr * plan.schedule.factor(done - 1)}
        if done > self.timed_from:
            window = Window(done - self.window_start, self.timer.stop())
            self.windows.append(window)
            self.window_start = done
            samples_per_sec = plan.global_batch / (window.step_ms / 1e3)
            per_device = samples_per_sec / plan.world_size
            values["step_time_ms"] = window.step_ms
            values["samples_per_sec"] = samples_per_sec
            values["samples_per_sec_per_device"] = per_device
            if self.flops is not None and self.flops.peak_tflops:
                values["mfu"] = self.flops.metrics(per_device)["mfu"]
        _check_finite(float(self.loss_sum), done - self.loss_count + 1, done, me.rank)
        self.stepper.recalibrate_delays()
        # Each data-parallel replica's loss once, from the rank that holds it.
        held = self.loss_sum if me.holds_loss else torch.zeros_like(self.loss_sum)
        self.mean_loss = sum_over_ranks(held, me.device) / (self.loss_count * me.dp_size)
        values["loss"] = self.mean_loss
        self.loss_sum.zero_()
        self.loss_count = 0
        if me.device.type == "cuda":
            values["max_allocated_gb"] = torch.cuda.max_memory_allocated(me.device) / 1e9
        if cfg.debug.log_delay_ms:
            time.sleep(cfg.debug.log_delay_ms / 1e3)  # stands for a slow file system
        if self.metric_log is not None:
            self.metric_log.log(done, values)
            timed_ms = sum(w.ms for w in self.windows)
            partial = summarize(plan, self.windows, timed_ms, self.mean_loss, self.flops)
            write_json(Path(plan.job_dir) / METRICS_FILE, {"step": done, "metrics": partial})

    def evaluate(self, done: int) -> dict[str, float]:
        """Evaluate on the held-out split (between timing windows); rank 0 logs it."""
        found = evaluate(self.stepper, self.plan, self.me)
        if self.metric_log is not None:
            self.metric_log.log(
                done, {"eval_loss": found["eval_loss"], "eval_accuracy": found["eval_accuracy"]}
            )
            log.info(
                "step %d/%d  eval loss %.4f  accuracy %.2f%% of %d held-out samples", done,
                self.plan.steps, found["eval_loss"], 100 * found["eval_accuracy"],
                found["eval_samples"],
            )  # fmt: skip
        return found

    def measured(self) -> dict[str, Any]:
        """The timed steps' metrics (the slowest rank's time), the first step, the compile
        cache, the resume and (on GPU) the training steps' peak memory."""
        me = self.me
        timed_ms = max_over_ranks(sum(w.ms for w in self.windows), me.device)
        metrics = summarize(
            self.plan, self.windows, timed_ms, self.mean_loss, self.flops,
            self.batches.epoch_samples,
        )  # fmt: skip
        if self.first_step_s is not None:
            metrics["first_step_s"] = self.first_step_s
        if self.compile_cache is not None:
            metrics["compile_cache"] = {**self.compile_cache, **cache_counters()}
        if self.first:
            metrics["resumed_from_step"] = self.first
        if me.device.type == "cuda":
            # Peak memory of the training steps, before the probe may capture a second graph.
            metrics["max_allocated_gb"] = torch.cuda.max_memory_allocated(me.device) / 1e9
        metrics["lr"] = self.plan.lr
        self.uplinks = self.uplink.stop(me, metrics["timed_steps"])
        return metrics

    def every_ranks_counters(self, timed_steps: int) -> dict[str, Any]:
        """The hardware counters over the timed steps, of every rank (collective)."""
        hw: list[Any] = [None] * self.me.world_size
        dist.all_gather_object(hw, self.counters.stop(timed_steps))
        return combine(hw)


def uplinks_per_step(run: TrainingRun, plan: RunPlan) -> dict[str, Any]:
    """On an emulated link: each node's uplink bytes per timed step, seen by its interface
    counters, beside what the strategy's collectives must send through it (gloo's
    algorithms, :mod:`linkbench.link.crossing`; NCCL's are read from its log by the
    launcher); the busiest uplink's, seen and predicted, and the bytes the busiest rank
    sends inside its node in calls that cross no uplink, as metrics."""
    spec, seen = plan.link, run.uplinks
    if spec is None or seen is None or spec.ranks < 2:  # one rank sends nothing anywhere
        return {}
    out: dict[str, Any] = {"uplinks": seen, "strategy": str(plan.config.strategy.name)}
    busiest = max(max(u["tx_bytes_per_step"], u["rx_bytes_per_step"]) for u in seen)
    metrics = {"uplink_bytes_per_step": busiest}
    calls = run.stepper.parallel.calls_per_step(plan.config)
    out["calls"] = [c._asdict() for c in calls]
    if plan.backend in PREDICTED_BACKENDS:
        predicted = uplink_bytes(calls, spec.ranks, spec.node_count)
        metrics["uplink_bytes_per_step_predicted"] = attach(seen, predicted)
        metrics["node_bytes_per_step_predicted"] = node_bytes(calls, spec.ranks, spec.node_count)
    # NCCL's algorithm per call is in its log: the launcher predicts from it after the job
    # (linkbench.link.nccl_bytes).
    return {**out, "metrics": metrics}


def evaluates(plan: RunPlan) -> bool:
    """Whether this run evaluates on the held-out split: as the plan decided, and on data
    whose labels cannot be learnt (evaluated only where asked) in its configuration's first
    run only (:attr:`RunPlan.describes`), since no verdict reads that accuracy."""
    return bool(plan.config.eval.enabled) and (plan.config.data.learnable or plan.describes)


def hw_scalars(hw: dict[str, Any]) -> dict[str, float]:
    """TensorBoard's ``hw/rank<N>/<counter>`` of every rank that had counters."""
    return {
        f"hw/rank{rank}/{key}": value
        for rank, record in enumerate(hw.get("ranks", []))
        for key, value in record.items()
        if key.endswith(("_mean", "_per_step"))
    }


def execution_mode(cfg: Config) -> str:
    """The execution mode as the log line shows it (nothing for eager)."""
    if cfg.compile:
        return f", torch.compile {cfg.compile_mode}"
    return ", CUDA graphs" if cfg.cuda_graphs else ""


def _check_finite(loss_sum: float, first_step: int, last_step: int, rank: int) -> None:
    """Stop the job on a non-finite loss (read where the host waits anyway: at logging)."""
    if not math.isfinite(loss_sum):
        steps = f"steps {first_step}-{last_step}" if first_step < last_step else f"step {last_step}"
        raise FloatingPointError(
            f"non-finite loss ({loss_sum}) in {steps} on rank {rank}; lower the learning rate "
            "(base_lr), or use precision=bf16 or fp32."
        )


def _wait_for(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _say_if_long(step_s: float, done: int, steps: int, log_every: int) -> None:
    """After the first step, the job's projected time at that pace, when it is long: the
    first log line may otherwise be minutes away (the first step holds one-time set-up, so
    the projection errs long)."""
    left_s = step_s * (steps - done)
    if left_s < LONG_JOB_S:
        return
    log.info(
        "step %d/%d took %.1f s: at that pace the %d steps left take up to about %.0f min, "
        "the next line in %.0f s (lower steps or log_every to see more sooner)",
        done, steps, step_s, steps - done, left_s / 60, step_s * (log_every - done % log_every),
    )  # fmt: skip


class Train(Task):
    """``task=train`` at run time (its option: :class:`linkbench.config.tasks.TrainTask`)."""

    @classmethod
    def run(cls, plan: RunPlan, me: Rank, board: Board | None) -> dict[str, Any]:
        """Run the job's steps on this rank; rank 0 returns the job's metrics and timeline."""
        cfg = plan.config
        run = TrainingRun(plan, me, board)
        log.info(
            "training %s with %s on %d x %s (%s, %s%s), global batch %d, lr %.4g",
            cfg.model.name, cfg.strategy.name, me.world_size, me.device.type, plan.backend,
            plan.precision, execution_mode(cfg), plan.global_batch, plan.lr,
        )  # fmt: skip
        run.run()
        phases.mark("timed_steps")
        metrics = run.measured()
        if evaluates(plan):  # the model as trained for `steps`, before the probes
            metrics.update(run.evaluate(plan.steps))
            phases.mark("evaluation")
        hw = run.every_ranks_counters(metrics["timed_steps"])
        phases.mark("counters")
        record_trace(run.stepper, plan, me)
        phases.mark("trace")
        metrics.update(probe.measure(run.stepper, plan, me))
        phases.mark("probe")
        if board is None:
            return {}
        crossing = uplinks_per_step(run, plan)
        if crossing:
            metrics.update(crossing.pop("metrics"))
        if "comm_exposed_ms" in metrics:  # figures below the probe's noise are no data
            standing = honest(metrics)
            shown = ("comm_exposed_ms", "comm_fraction", "compute_step_ms")
            assert run.metric_log is not None  # rank 0's, as the board is
            run.metric_log.log(plan.steps, {k: standing[k] for k in shown if k in standing})
        board.scalars(plan.steps, hw_scalars(hw))
        out = {"metrics": metrics, "timeline": run.timeline, "hw": hw}
        if crossing:
            out["link"] = {"per_step": crossing}
        return out

    @classmethod
    def report(cls, result: JobResult) -> None:
        metrics = result["metrics"]
        one_rank = result.get("world_size") == 1 and "comm_exposed_ms" not in metrics
        comm = ", no link (one rank)" if one_rank else ""
        if not one_rank and (result.get("round") or 0) > 0:
            comm = ", exposed communication measured in round 0"  # RunPlan.describes
        if "comm_exposed_ms" in metrics:
            spread = ""
            if "comm_exposed_ms_low" in metrics:
                spread = (
                    f" [{metrics['comm_exposed_ms_low']:.2f}, "
                    f"{metrics['comm_exposed_ms_high']:.2f}]"
                )
            noise = probe_mark(metrics)
            noise = f", {noise}" if noise else ""
            comm = (
                f", exposed communication {metrics['comm_exposed_ms']:.2f} ms{spread} "
                f"({100 * metrics['comm_fraction']:.0f}%{noise})"
            )
        log.info(
            "done: %.1f samples/s, %.2f ms/step%s, final loss %.4f -> %s",
            metrics.get("samples_per_sec", float("nan")),
            metrics.get("step_time_ms", float("nan")),
            comm,
            metrics.get("final_loss", float("nan")),
            Path(result["job_dir"]) / RESULT_FILE,
        )
        if "comm_delay_injected_ms" in metrics:
            log.info(
                "debug.comm_delay_ms injected %.2f ms of communication per step (%.1f buckets): "
                "exposed communication lies between 0 and that plus the collectives' own time",
                metrics["comm_delay_injected_ms"], metrics["comm_delay_buckets"],
            )  # fmt: skip
        if warning := (result.get("trace") or {}).get("warning"):
            log.warning("trace: %s", warning)
        if "mfu" in metrics:
            log.info(
                "model FLOPs: %.1f TFLOP/s per device, MFU %.1f%% of the %s TFLOP/s peak",
                metrics["model_tflops_per_device"], 100 * metrics["mfu"], metrics["peak_tflops"],
            )  # fmt: skip
