"""With held-out accuracy on real data, a comparison's verdict joins speed and accuracy: a
speed-up counts where accuracy holds (MLPerf's practice of a quality target)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from linkbench.analysis.report import write_summary
from linkbench.files import RESULT_FILE, write_json


def _sweep(
    sweep: Path, accuracy_drop: float, data: str = "digits", learnable: bool | None = None
) -> str:
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
                    **({} if learnable is None else {"data_learnable": learnable}),
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


@pytest.mark.parametrize(
    ("data", "learnable"),
    [("synthetic", None), ("synthetic", False), ("noise", False)],
)
def test_data_whose_labels_cannot_be_learnt_gets_no_accuracy_verdict(tmp_path, data, learnable):
    """What the job recorded of its data option decides (an outside option of random labels,
    ``noise``, too); a file written before it was recorded: synthetic data."""
    assert "accuracy" not in _sweep(tmp_path, 0.012, data=data, learnable=learnable)


def test_data_whose_labels_can_be_learnt_gets_its_accuracy_verdict_whatever_its_name(tmp_path):
    assert ", but accuracy lower by 1.2 [" in _sweep(tmp_path, 0.012, data="mine", learnable=True)


def test_a_sweep_over_seeds_pairs_each_seed_of_the_arm_with_the_same_seed_of_the_baseline(
    tmp_path,
):
    """Seeds are the runs of a configuration (lr_scaling_cpu): each seed's data order and
    weights are shared by both arms, so the seed's own effect on accuracy cancels in pairs.
    Here it is ±3 points from seed to seed, and the arm is 1 point worse at every seed."""
    for seed, luck in enumerate((0.03, -0.03, 0.0, 0.02)):
        for scaling, accuracy in (("none", 0.90), ("linear", 0.89)):
            name = f"scaling={scaling},seed={seed}"
            (tmp_path / name).mkdir()
            write_json(
                tmp_path / name / RESULT_FILE,
                {
                    "status": "completed",
                    "task": "train",
                    "data": "digits",
                    "seed": seed,
                    "settings": {"scaling": scaling, "seed": seed},
                    "metrics": {
                        "samples_per_sec": 1000.0 * (1 + 0.001 * seed),
                        "step_time_ms": 10.0,
                        "eval_accuracy": accuracy + luck,
                    },
                },
            )
    summary = write_summary(tmp_path, axis="scaling", baseline="none", plots=False)
    assert summary is not None
    line = next(x for x in summary.splitlines() if "scaling=linear vs none" in x)
    assert "4 vs 4 runs, paired" in line, line
    # Unpaired, ±3 points of luck would hide the 1 point; paired, it is exact.
    assert "**equal** (within ±2%), accuracy lower by 1.0 [1.0, 1.0] points" in line, line


def _three_arms(rng: random.Random, rounds: int = 5) -> list[dict]:
    """Three arms against a baseline, all of the same accuracy (sd 1 point a run); two of
    them 10 % faster (CV 5 %)."""
    results = []
    for arm, speed in (("base", 1.0), ("a", 1.1), ("b", 1.1), ("c", 1.0)):
        for r in range(rounds):
            value = 1000 * speed * rng.lognormvariate(0, 0.05)
            results.append({
                "job": f"arm={arm},round={r}", "status": "completed", "data": "digits",
                "settings": {"arm": arm, "round": r}, "round": r,
                "metrics": {"samples_per_sec": value, "step_time_ms": 1e5 / value,
                            "eval_accuracy": 0.9 + rng.gauss(0, 0.01)},
            })  # fmt: skip
    return results


def test_accuracy_verdicts_are_a_family_of_their_own():
    """Before: accuracy borrowed the speed family's last level (which Holm raises once the two
    faster arms are decided), so "accuracy lower/higher" appeared somewhere in 13.2 ± 0.8 %
    of these sweeps with identical accuracy everywhere."""
    import math

    from linkbench.analysis.compare import sweep_comparisons

    rng = random.Random(8)
    sweeps = 800
    named = 0
    for _ in range(sweeps):
        found = sweep_comparisons(_three_arms(rng), axis="arm", baseline="base")
        assert len(found.comparisons) == 3
        named += any(c.accuracy_verdict in ("lower", "higher") for c in found.comparisons)
    assert named / sweeps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / sweeps), named
