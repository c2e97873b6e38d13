"""One Hydra job from start to result.json: plan, launch, record.

Called by ``run.py`` once per job (a sweep calls it once per combination, in one process).
Every outcome leaves a ``result.json`` in the job's directory, with ``status`` "completed",
"failed" or "interrupted", so a failed job loses nothing that was measured before it failed.
After the workers end, the NCCL logs they wrote are parsed to verify the transport.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from linkbench import checkpoint
from linkbench.callbacks import sweep_dimensions
from linkbench.errors import ConfigError, JobFailed, JobInterrupted
from linkbench.failures import Stopped, first_failure, first_recorded_failure
from linkbench.flops import train_flops_per_sample
from linkbench.launch import check_outside_launch, export_slurm_world, launch
from linkbench.nccl_log import parse_files
from linkbench.plan import JobPlan, Machine, make_plan
from linkbench.provenance import git_state
from linkbench.results import (
    HARDWARE_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    RERUN_FILE,
    RESULT_FILE,
    headline,
    read_json,
    write_json,
)
from linkbench.tensorboard_log import write_job_summary
from linkbench.topology import versions
from linkbench.transport import verify
from linkbench.worker import worker_main

log = logging.getLogger("linkbench")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def describe_plan(plan: JobPlan) -> dict[str, Any]:
    """The plan's facts as result.json records them."""
    c = plan.config
    return {
        "task": c["task"]["name"],
        "world_size": plan.world_size,
        "nnodes": plan.nnodes,
        "backend": plan.backend,
        "device_type": plan.device_type,
        "interconnect": c["interconnect"]["name"],
        "expected_transport": c["interconnect"]["expected_transport"],
        "env": plan.env.applied,
        "env_replaced": plan.env.replaced,
        "env_inherited_nccl": plan.env.inherited_nccl,
        "precision": plan.precision,
        "model": c["model"]["name"],
        "data": c["data"]["name"],
        "batch": c["batch"],
        "global_batch": plan.global_batch,
        "scaling": c["scaling"]["rule"],
        "lr": plan.lr,
        "steps": c["steps"],
        "warmup_steps": c["warmup_steps"],
        "seed": c["seed"],
        "repeats": c["repeats"],
        "notes": plan.notes,
    }


def _failure_message(error: ChildFailedError, plan: JobPlan) -> tuple[int, str]:
    """The rank that failed first, and a message naming it, its error and its log, then the
    exit codes of the other ranks the launcher saw fail."""
    rank, reason = first_failure(
        error.failures, plan.log_dir, plan.world_size, ended_at=time.time()
    )
    message = f"rank {rank} failed first: {reason} [log: {plan.log_dir / f'rank{rank}.stderr.log'}]"
    others = [r for r in sorted(error.failures) if r != rank]
    if others:
        exits = ", ".join(f"rank {r} exit code {error.failures[r].exitcode}" for r in others)
        message += f"; then {exits}"
    return rank, message


def check_transport(plan: JobPlan) -> dict[str, Any]:
    """Verify the transport from the NCCL logs the workers left (NCCL_DEBUG_FILE or stdout)."""
    logs = plan.log_dir
    summary = None
    if plan.backend == "nccl":
        files = sorted(logs.glob("nccl.rank*.log")) or sorted(logs.glob("rank*.std*.log"))
        summary = parse_files(files)
    expected = plan.config["interconnect"]["expected_transport"]
    transport = verify(summary, expected, plan.backend, plan.world_size)
    if transport["verified"] is False:
        log.warning(
            "!!! TRANSPORT NOT VERIFIED: interconnect=%s expects %s, but %s",
            plan.config["interconnect"]["name"], expected, transport["reason"],
        )  # fmt: skip
    elif transport["verified"]:
        log.info("transport verified: %s", transport["reason"])
    else:
        log.info("transport %s, not verified: %s", transport["transport"], transport["reason"])
    return transport


def combine_transports(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """One verdict for all repeats: false if any repeat contradicts the arm."""
    for verdict in (False, None):
        for check in checks:
            if check["verified"] is verdict:
                return {**check, "repeats_checked": len(checks)}
    return {**checks[0], "repeats_checked": len(checks)}


def median_metrics(repeat_metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric metric's median over the repeats (other values from the first repeat)."""
    if len(repeat_metrics) == 1:
        return dict(repeat_metrics[0])
    merged = dict(repeat_metrics[0])
    for key, value in merged.items():
        values = [m.get(key) for m in repeat_metrics]
        if isinstance(value, (int, float)) and all(isinstance(v, (int, float)) for v in values):
            merged[key] = statistics.median(values)
    return merged


def _write_manifest(plan: JobPlan, job_dir: Path, hardware: dict[str, Any]) -> None:
    hardware = hardware or {"versions": versions()}
    manifest = {
        "config": plan.config,
        "overrides": plan.overrides,
        "git": git_state(),
        "env": plan.env.applied,
        "env_replaced": plan.env.replaced,
        "seed": plan.config["seed"],
        **hardware,
    }
    write_json(job_dir / MANIFEST_FILE, manifest)


def write_rerun_config(plan: JobPlan, job_dir: Path) -> None:
    """rerun.yaml: the resolved config with this machine's choices pinned (devices, backend),
    for ``python run.py --config-path <job> --config-name rerun``."""
    pinned = {**plan.config, "devices": plan.nproc_per_node, "resume": False}
    pinned["backend"] = {**plan.config["backend"], "name": plan.backend}
    header = f"# Rerun this job: python run.py --config-path {job_dir} --config-name rerun\n"
    (job_dir / RERUN_FILE).write_text(header + OmegaConf.to_yaml(OmegaConf.create(pinned)))


def _swept(hydra_cfg: DictConfig) -> set[str]:
    """The keys this job's sweep varies (from the sweep's multirun.yaml), for TensorBoard."""
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return set()
    saved = Path(hydra_cfg.sweep.dir) / "multirun.yaml"
    dimensions = sweep_dimensions(OmegaConf.load(saved).hydra) if saved.is_file() else None
    return {key for key, count in (dimensions or {}).items() if count > 1}


def _completed_result(job_dir: Path) -> dict[str, Any] | None:
    previous = read_json(job_dir / RESULT_FILE)
    return previous if previous and previous.get("status") == "completed" else None


def timing_overheads(
    timeline: dict[str, float], launched_at: float, returned_at: float
) -> dict[str, float]:
    """What a run spent outside its task (process start, rendezvous, set-up, teardown), and
    from its launch to the end of its first training step, in seconds (wall clock)."""
    out = {}
    if "task_started_at" in timeline:
        task_s = timeline["task_ended_at"] - timeline["task_started_at"]
        out["overhead_s"] = (returned_at - launched_at) - task_s
    if "first_step_done_at" in timeline:
        out["launch_to_first_step_s"] = timeline["first_step_done_at"] - launched_at
    return out


def with_flops(plan: JobPlan) -> JobPlan:
    """The plan with the training FLOPs of one sample, for MFU (train jobs only)."""
    c = plan.config
    if c["task"]["name"] != "train":
        return plan
    image_size, classes = c["data"]["image_size"], c["data"]["num_classes"]
    flops = train_flops_per_sample(c["model"], image_size, classes)
    return dataclasses.replace(plan, flops_per_sample=flops)


def _run_repeats(
    plan: JobPlan, result: dict, repeat_metrics: list, checks: list, job_started_at: float
) -> None:
    """Launch the job's world ``repeats`` times, collecting metrics and transport checks.

    The first run's first training step is also timed from the job's start
    (``time_to_first_step_s``, after Hydra composed the config) and stamped with the wall
    clock (``first_step_done_at``, seconds since the epoch) for tools timing the command."""
    repeats = plan.config["repeats"]
    for repeat in range(repeats):
        run = dataclasses.replace(plan, repeat=repeat)
        log.info(
            "job %s: %s on %d %s worker(s), backend %s, interconnect %s%s",
            plan.job_dir, result["task"], plan.world_size, plan.device_type, plan.backend,
            result["interconnect"], f", run {repeat + 1}/{repeats}" if repeats > 1 else "",
        )  # fmt: skip
        (Path(plan.job_dir) / METRICS_FILE).unlink(missing_ok=True)
        launched_at = time.time()
        try:
            returns = launch(run)
        finally:
            checks.append(check_transport(run))
        metrics = returns[0].pop("metrics")
        timeline = returns[0].pop("timeline", {})
        metrics.update(timing_overheads(timeline, launched_at, time.time()))
        if repeat == 0 and "first_step_done_at" in timeline:
            result["first_step_done_at"] = timeline["first_step_done_at"]
            result["time_to_first_step_s"] = timeline["first_step_done_at"] - job_started_at
        repeat_metrics.append(metrics)
        result.update(returns[0])


def _finish(result: dict, plan: JobPlan | None, repeat_metrics: list, checks: list) -> None:
    """Fill in what the job measured, whatever its status, and write its files."""
    job_dir = Path(result["job_dir"])
    # A run that did not complete keeps what it measured (rank 0 writes metrics.json).
    if result["status"] != "completed" and (partial := read_json(job_dir / METRICS_FILE)):
        repeat_metrics.append(partial["metrics"])
    result["metrics"] = median_metrics(repeat_metrics) if repeat_metrics else {}
    if len(repeat_metrics) > 1:
        result["repeat_metrics"] = repeat_metrics
    if plan is not None:
        hardware = read_json(job_dir / HARDWARE_FILE) or {}
        result["warnings"] = list(hardware.get("warnings", []))
        if checks:
            result["transport"] = combine_transports(checks)
        _write_manifest(plan, job_dir, hardware)
        completed = result["status"] == "completed"
        swept = _swept(HydraConfig.get())
        write_job_summary(plan, result["metrics"], repeat_metrics, completed, swept)
    result["ended_at"] = _now()
    write_json(job_dir / RESULT_FILE, result)


def _plan_job(
    cfg: DictConfig, job_dir: Path, overrides: list[str], machine: Machine, result: dict
) -> JobPlan:
    plan = make_plan(cfg, str(job_dir), overrides, machine)
    if cfg.resume and (step := checkpoint.saved_step(job_dir)) is not None:
        plan = dataclasses.replace(plan, resume_step=step)
        log.info("resume: %s continues from its checkpoint of step %d", job_dir, step)
        result["resumed_from_step"] = step
    return plan


def _run_other_rank(
    cfg: DictConfig, job_dir: Path, overrides: list[str], machine: Machine
) -> float:
    """A rank other than 0 under an outside launcher: train, write nothing of the job's."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)  # rank 0 alone writes the job's log file
    worker_main(_plan_job(cfg, job_dir, overrides, machine, {}))
    return 0.0


def run_job(cfg: DictConfig) -> float:
    """Plan, launch (``repeats`` times) and record one job; returns its headline metric.

    Under torchrun or a SLURM job of several tasks, this process is one rank of the world:
    global rank 0 runs and records the job, the other ranks only train."""
    hydra_cfg = HydraConfig.get()
    job_dir = Path(hydra_cfg.runtime.output_dir)
    export_slurm_world()
    machine = Machine.current()
    overrides = [o for o in hydra_cfg.overrides.task if not o.startswith("resume=")]
    if machine.outside is not None:
        check_outside_launch(hydra_cfg, dict(machine.environ))
        if machine.outside.rank != 0:
            return _run_other_rank(cfg, job_dir, overrides, machine)
    if cfg.get("resume") and (previous := _completed_result(job_dir)):
        log.info("resume: %s already completed; skipping it", job_dir)
        return _report(previous)
    result: dict[str, Any] = {"status": "failed", "overrides": overrides, "job_dir": str(job_dir)}
    result["started_at"] = _now()
    job_started_at = time.time()
    started = time.monotonic()
    plan = None
    repeat_metrics: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    try:
        plan = with_flops(_plan_job(cfg, job_dir, overrides, machine, result))
        write_rerun_config(plan, job_dir)
        result.update(describe_plan(plan))
        for note in plan.notes:
            log.warning(note)
        _run_repeats(plan, result, repeat_metrics, checks, job_started_at)
        result["status"] = "completed"
    except ConfigError as error:
        result["error"] = str(error)
        raise
    except ChildFailedError as error:
        failed_run = dataclasses.replace(plan, repeat=len(repeat_metrics))
        result["failed_rank"], result["error"] = _failure_message(error, failed_run)
        log.error("job failed: %s", result["error"])
        raise JobFailed(f"{job_dir}: {result['error']}") from None
    except (KeyboardInterrupt, SignalException, Stopped) as error:
        result["status"] = "interrupted"
        result["error"] = f"interrupted ({type(error).__name__}: {error})"
        if isinstance(error, SignalException):
            name = signal.Signals(error.sigval).name
            raise JobInterrupted(f"{job_dir}: stopped by {name}, with its workers") from None
        raise
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
        if plan is not None and plan.in_place:  # this rank's task failed, perhaps after another
            result["failed_rank"], result["error"] = first_recorded_failure(
                plan.log_dir, plan.world_size
            ) or (0, result["error"])
            log.error(
                "job failed: rank %d failed first: %s", result["failed_rank"], result["error"]
            )
            raise JobFailed(f"{job_dir}: rank {result['failed_rank']}: {result['error']}") from None
        raise  # the launcher itself failed (rendezvous, ...): the record keeps the error
    finally:
        result["duration_s"] = round(time.monotonic() - started, 3)
        _finish(result, plan, repeat_metrics, checks)
    return _report(result)


def _report(result: dict[str, Any]) -> float:
    metrics = result["metrics"]
    task = result.get("task", "train")
    if task == "train":
        comm = ""
        if "comm_exposed_ms" in metrics:
            comm = (
                f", exposed communication {metrics['comm_exposed_ms']:.2f} ms "
                f"({100 * metrics['comm_fraction']:.0f}%)"
            )
        log.info(
            "done: %.1f samples/s, %.2f ms/step%s, final loss %.4f -> %s",
            metrics.get("samples_per_sec", float("nan")),
            metrics.get("step_time_ms", float("nan")),
            comm,
            metrics.get("final_loss", float("nan")),
            Path(result["job_dir"]) / RESULT_FILE,
        )
        if "mfu" in metrics:
            log.info(
                "model FLOPs: %.1f TFLOP/s per device, MFU %.1f%% of the %s TFLOP/s peak",
                metrics["model_tflops_per_device"], 100 * metrics["mfu"], metrics["peak_tflops"],
            )  # fmt: skip
        if "launch_to_first_step_s" in metrics:
            log.info(
                "first step done %.1f s after launch (the step itself %.2f s); %.1f s per run "
                "outside the task (process start, rendezvous, set-up, teardown)",
                metrics["launch_to_first_step_s"], metrics.get("first_step_s", float("nan")),
                metrics.get("overhead_s", float("nan")),
            )  # fmt: skip
    else:
        log.info(
            "done: peak %s busbw %.2f GB/s at %s bytes -> %s",
            metrics["peak_op"], metrics["busbw_gbps_peak"], f"{metrics['peak_bytes']:,}",
            Path(result["job_dir"]) / RESULT_FILE,
        )  # fmt: skip
    return float(metrics.get(headline(result)[0], 0.0))
