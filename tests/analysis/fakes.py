"""Sweeps whose answer a test chose: job directories with the result.json linkbench writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from linkbench.config.overrides import settings


def fake_job(
    sweep: Path,
    overrides: list[str],
    runs: list[float],
    status: str = "completed",
    round_: int | None = None,
    extra: dict | None = None,
    fields: dict | None = None,
) -> Path:
    """A job directory with a result.json as linkbench writes it (samples/s per run, each
    run's ``extra`` metrics, the job's other ``fields``)."""
    name = ",".join(sorted(overrides + ([f"round={round_}"] if round_ is not None else [])))
    job = sweep / name
    job.mkdir(parents=True)
    repeat_metrics = [
        {"samples_per_sec": v, "step_time_ms": 1e3 / v, **(extra or {})} for v in runs
    ]
    result = {
        "status": status,
        "task": "train",
        "backend": "nccl",
        "round": round_,
        "overrides": overrides + ([f"round={round_}"] if round_ is not None else []),
        "settings": settings(overrides + ([f"round={round_}"] if round_ is not None else [])),
        "metrics": repeat_metrics[len(runs) // 2] if runs else {},
        "transport": {"transport": "P2P", "verified": True},
        **(fields or {}),
    }
    if len(runs) > 1:
        result["repeat_metrics"] = repeat_metrics
    (job / "result.json").write_text(json.dumps(result))
    return job


def run_conditions(load: float, seconds: dict[str, float] | None = None) -> dict[str, Any]:
    """One run's ``conditions`` on 2 usable cores: the load average at both ends; with
    ``seconds``, the CPU seconds its 10 s took (``cores_busy_s``, ``own_s``, ``kernel_s``)."""
    start: dict[str, Any] = {"cpus_usable": 2, "load_1m": load}
    end: dict[str, Any] = {"cpus_usable": 2, "load_1m": load}
    if seconds is not None:
        start["cpu_s"] = {"at_s": 100.0, "cores_busy_s": 0.0, "own_s": 5.0, "kernel_s": 1.0}
        end["cpu_s"] = {"at_s": 110.0, **{k: start["cpu_s"][k] + v for k, v in seconds.items()}}
    return {"start": start, "end": end}


OWN_ONLY = {"cores_busy_s": 19.0, "own_s": 18.0, "kernel_s": 0.5}
"""A run's CPU seconds with its own ranks on both cores: other programs 0.05 of a core."""
BESIDE_A_HOG = {"cores_busy_s": 19.5, "own_s": 10.0, "kernel_s": 0.5}
"""Other programs 0.9 of a core."""
