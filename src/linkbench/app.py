"""One Hydra job from start to result.json: plan, launch, record.

Called by ``run.py`` once per job (a sweep calls it once per combination, in one process).
Every outcome leaves a ``result.json`` in the job's directory, with ``status`` "completed",
"failed" or "interrupted", so a failed job loses nothing that was measured before it failed.
After the workers end, the NCCL logs they wrote are parsed to verify the transport.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from linkbench.errors import ConfigError, JobFailed
from linkbench.launch import launch
from linkbench.nccl_log import parse_files
from linkbench.plan import JobPlan, make_plan
from linkbench.results import (
    HARDWARE_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    RESULT_FILE,
    read_json,
    write_json,
)
from linkbench.transport import verify
from linkbench.worker import LOG_DIR

log = logging.getLogger("linkbench")
# The metric run.py returns to Hydra (and sweepers optimise), per task.
HEADLINE = {"train": "samples_per_sec", "allreduce": "busbw_gbps_peak"}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def describe_plan(plan: JobPlan) -> dict[str, Any]:
    """The plan's facts as result.json records them."""
    c = plan.config
    return {
        "task": c["task"]["name"],
        "world_size": plan.world_size,
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
        "notes": plan.notes,
    }


def _failure_message(error: ChildFailedError, job_dir: Path) -> str:
    """Every failed rank with the first line of its error, rank order (the first to fail
    may not be the one whose timestamp is first: the others fail when it disconnects)."""
    parts = []
    for rank, failure in sorted(error.failures.items()):
        detail = failure.message
        if isinstance(detail, dict):
            detail = str(detail.get("message", ""))
        first_line = str(detail).strip().splitlines()[0] if str(detail).strip() else ""
        log_file = job_dir / LOG_DIR / f"rank{failure.local_rank}.stderr.log"
        parts.append(
            f"rank {rank} failed (exit code {failure.exitcode})"
            + (f": {first_line}" if first_line else "")
            + f" [log: {log_file}]"
        )
    return "; ".join(parts)


def check_transport(plan: JobPlan, job_dir: Path) -> dict[str, Any]:
    """Verify the transport from the NCCL logs the workers left (NCCL_DEBUG_FILE or stdout)."""
    logs = job_dir / LOG_DIR
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


def _record_hardware(result: dict[str, Any], plan: JobPlan, job_dir: Path) -> None:
    hardware = read_json(job_dir / HARDWARE_FILE) or {}
    result["warnings"] = list(hardware.get("warnings", []))
    result["transport"] = check_transport(plan, job_dir)
    manifest = {
        "config": plan.config,
        "overrides": plan.overrides,
        "env": plan.env.applied,
        "seed": plan.config["seed"],
        **hardware,
    }
    write_json(job_dir / MANIFEST_FILE, manifest)


def run_job(cfg: DictConfig) -> float:
    """Plan, launch and record one job; returns its headline metric for Hydra's sweepers."""
    hydra_cfg = HydraConfig.get()
    job_dir = Path(hydra_cfg.runtime.output_dir)
    overrides = list(hydra_cfg.overrides.task)
    result: dict[str, Any] = {"status": "failed", "overrides": overrides, "job_dir": str(job_dir)}
    result["started_at"] = _now()
    started = time.monotonic()
    plan = None
    try:
        plan = make_plan(cfg, str(job_dir), overrides)
        result.update(describe_plan(plan))
        for note in plan.notes:
            log.warning(note)
        log.info(
            "job %s: %s on %d %s worker(s), backend %s, interconnect %s",
            job_dir, result["task"], plan.world_size, plan.device_type, plan.backend,
            result["interconnect"],
        )  # fmt: skip
        returns = launch(plan)
        result.update(returns[0])
        result["status"] = "completed"
    except ConfigError as error:
        result["error"] = str(error)
        raise
    except ChildFailedError as error:
        result["error"] = _failure_message(error, job_dir)
        log.error("job failed: %s", result["error"])
        raise JobFailed(f"{job_dir}: {result['error']}") from None
    except (KeyboardInterrupt, SignalException) as error:
        result["status"] = "interrupted"
        result["error"] = f"interrupted ({type(error).__name__}: {error})"
        raise
    finally:
        if "metrics" not in result:
            partial = read_json(job_dir / METRICS_FILE)
            result["metrics"] = partial["metrics"] if partial else {}
        if plan is not None:
            _record_hardware(result, plan, job_dir)
        result["ended_at"] = _now()
        result["duration_s"] = round(time.monotonic() - started, 3)
        write_json(job_dir / RESULT_FILE, result)
    return _report(result)


def _report(result: dict[str, Any]) -> float:
    metrics = result["metrics"]
    headline = HEADLINE[result["task"]]
    if result["task"] == "train":
        log.info(
            "done: %.1f samples/s, %.2f ms/step, exposed communication %.2f ms (%.0f%%), "
            "final loss %.4f -> %s",
            metrics.get("samples_per_sec", float("nan")),
            metrics.get("step_time_ms", float("nan")),
            metrics.get("comm_exposed_ms", float("nan")),
            100 * metrics.get("comm_fraction", float("nan")),
            metrics.get("final_loss", float("nan")),
            Path(result["job_dir"]) / RESULT_FILE,
        )
    else:
        log.info(
            "done: peak %s busbw %.2f GB/s at %s bytes -> %s",
            metrics["peak_op"], metrics["busbw_gbps_peak"], f"{metrics['peak_bytes']:,}",
            Path(result["job_dir"]) / RESULT_FILE,
        )  # fmt: skip
    return float(metrics.get(headline, 0.0))
