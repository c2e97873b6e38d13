"""One Hydra job from start to result.json: plan, launch, record.

Called by ``run.py`` once per job (a sweep calls it once per combination, in one process).
Every outcome leaves a ``result.json`` in the job's directory, with ``status`` "completed",
"failed" or "interrupted", so a failed job loses nothing that was measured before it failed.
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
from linkbench.launch import LOG_DIR, launch
from linkbench.plan import JobPlan, make_plan
from linkbench.results import METRICS_FILE, RESULT_FILE, read_json, write_json

log = logging.getLogger("linkbench")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def describe_plan(plan: JobPlan) -> dict[str, Any]:
    """The plan's facts as result.json records them."""
    c = plan.config
    return {
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
    rank, failure = error.get_first_failure()
    detail = failure.message if isinstance(failure.message, str) else ""
    if isinstance(failure.message, dict):
        detail = str(failure.message.get("message", ""))
    last_line = detail.strip().splitlines()[-1] if detail.strip() else ""
    where = job_dir / LOG_DIR / f"rank{failure.local_rank}.stderr.log"
    return (
        f"rank {rank} failed (exit code {failure.exitcode})"
        + (f": {last_line}" if last_line else "")
        + f"; its log is {where}"
    )


def run_job(cfg: DictConfig) -> float:
    """Plan, launch and record one job; returns its global samples/s for Hydra's sweepers."""
    hydra_cfg = HydraConfig.get()
    job_dir = Path(hydra_cfg.runtime.output_dir)
    overrides = list(hydra_cfg.overrides.task)
    result: dict[str, Any] = {"status": "failed", "overrides": overrides, "job_dir": str(job_dir)}
    result["started_at"] = _now()
    started = time.monotonic()
    try:
        plan = make_plan(cfg, str(job_dir), overrides)
        result.update(describe_plan(plan))
        for note in plan.notes:
            log.warning(note)
        log.info(
            "job %s: %d %s worker(s), backend %s, interconnect %s",
            job_dir, plan.world_size, plan.device_type, plan.backend, result["interconnect"],
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
        result["ended_at"] = _now()
        result["duration_s"] = round(time.monotonic() - started, 3)
        write_json(job_dir / RESULT_FILE, result)
    metrics = result["metrics"]
    log.info(
        "done: %.1f samples/s, %.2f ms/step, final loss %.4f -> %s",
        metrics.get("samples_per_sec", float("nan")),
        metrics.get("step_time_ms", float("nan")),
        metrics.get("final_loss", float("nan")),
        job_dir / RESULT_FILE,
    )
    return float(metrics.get("samples_per_sec", 0.0))
