"""Sweeps whose answer a test chose: job directories with the result.json linkbench writes."""

from __future__ import annotations

import json
from pathlib import Path

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
