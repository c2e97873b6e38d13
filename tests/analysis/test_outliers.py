"""An outlier run is named in the summary by its job directory, with the verdict recomputed
without its round beside the verdict with it; nothing is dropped silently."""

from __future__ import annotations

import random
from pathlib import Path

from linkbench.analysis.report import write_summary
from linkbench.analysis.sweep import group, load_sweep, swept_keys
from linkbench.files import RESULT_FILE, write_json


def _job(sweep: Path, arm: str, r: int, samples_per_sec: float) -> str:
    name = f"interconnect={arm},round={r}"
    (sweep / name).mkdir()
    write_json(
        sweep / name / RESULT_FILE,
        {
            "status": "completed",
            "task": "train",
            "settings": {"interconnect": arm, "round": r},
            "round": r,
            "metrics": {"samples_per_sec": samples_per_sec, "step_time_ms": 1e5 / samples_per_sec},
        },
    )
    return name


def _sweep(sweep: Path, slow_round: int | None) -> None:
    """5 fixed rounds, nvlink 10 % faster; in ``slow_round`` nvlink's run took 1.5x as long."""
    rng = random.Random(0)
    for r in range(5):
        slow = 1.5 if r == slow_round else 1.0
        _job(sweep, "nvlink", r, 1100 * rng.gauss(1, 0.01) / slow)
        _job(sweep, "pcie", r, 1000 * rng.gauss(1, 0.01))


def test_an_outlier_run_is_named_and_the_verdict_is_shown_without_it(tmp_path):
    _sweep(tmp_path, slow_round=2)
    configs = group(load_sweep(tmp_path), swept_keys(load_sweep(tmp_path)))
    nvlink = next(c for c in configs if c.values_by_key["interconnect"] == "nvlink")
    assert [r.job for r in nvlink.outliers("samples_per_sec")] == ["interconnect=nvlink,round=2"]
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None
    line = next(x for x in summary.splitlines() if "interconnect=nvlink vs pcie" in x)
    assert "**inconclusive**" in line.split("; outlier")[0]  # with it: the slow run blurs it
    assert "outlier run(s): interconnect=nvlink,round=2, without their rounds:" in line
    assert line.endswith("**faster**")


def test_a_sweep_without_outliers_names_none(tmp_path):
    _sweep(tmp_path, slow_round=None)
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None and "outlier run" not in summary
