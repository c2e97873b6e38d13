"""With held-out accuracy on real data, a comparison's verdict joins speed and accuracy: a
speed-up counts where accuracy holds (MLPerf's practice of a quality target)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from linkbench.analysis.report import write_summary
from linkbench.files import RESULT_FILE, write_json


def _sweep(sweep: Path, accuracy_drop: float, data: str = "digits") -> str:
    """4 rounds of batch 256 against batch 32: 30 % faster, accuracy lower by the drop."""
    rng = random.Random(5)
    for r in range(4):
        for batch, speed, accuracy in ((32, 1000.0, 0.90), (256, 1300.0, 0.90 - accuracy_drop)):
            name = f"batch={batch},round={r}"
            value = speed * rng.gauss(1, 0.01)
            (sweep / name).mkdir()
            write_json(
                sweep / name / RESULT_FILE,
                {
                    "status": "completed",
                    "task": "train",
                    "data": data,
                    "settings": {"batch": batch, "round": r},
                    "round": r,
                    "metrics": {
                        "samples_per_sec": value,
                        "step_time_ms": 1e5 / value,
                        "eval_accuracy": accuracy + rng.gauss(0, 0.001),
                    },
                },
            )
    summary = write_summary(sweep, axis="batch", baseline=32, plots=False)
    assert summary is not None
    return next(line for line in summary.splitlines() if "batch=256 vs 32" in line)


@pytest.mark.parametrize(
    ("drop", "said"),
    [
        (0.0, "): **faster**, accuracy"),
        (0.0, ", accuracy equal within ±0.5 points"),
        (0.012, ", but accuracy lower by 1.2 ["),
    ],
)
def test_the_verdict_says_whether_accuracy_held(tmp_path, drop, said):
    assert said in _sweep(tmp_path, drop)


def test_synthetic_data_gets_no_accuracy_verdict(tmp_path):
    assert "accuracy" not in _sweep(tmp_path, 0.012, data="synthetic")
