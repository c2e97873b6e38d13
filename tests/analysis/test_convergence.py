"""Convergence from real runs: held-out accuracy on digits, equal-epoch sweeps, the
lr_scaling_cpu study's summary."""

from __future__ import annotations

import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from ..conftest import QUICK, load_result, run_cli


def test_digits_reach_ninety_percent_held_out_in_five_epochs(tmp_path):
    done = run_cli(["data=digits", "eval.every_steps=50", "epochs=5", f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    assert result["metrics"]["eval_accuracy"] > 0.90
    assert result["metrics"]["eval_samples"] == 360
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/accuracy")] == [50, 100, 110]


def test_the_held_out_loss_is_the_training_loss(tmp_path):
    """With another ``model.loss`` (multi-margin: about 0.9 for an untrained 10-class model,
    where cross-entropy is ln 10 = 2.30) the held-out loss follows it."""
    loss = "model.loss=torch.nn.functional.multi_margin_loss"
    done = run_cli([*QUICK, loss, "eval.enabled=true", f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = load_result(tmp_path)["metrics"]
    assert 0 < metrics["eval_loss"] < 1.2, metrics


@pytest.mark.slow
def test_an_equal_epoch_sweep_runs_the_same_samples(tmp_path):
    args = ["-m", "repeats=1", "data=digits", "batch=16,64", "epochs=3", "task.no_sync_steps=0",
            "untimed_steps=2", "log_every=2", f"hydra.sweep.dir={tmp_path}"]  # fmt: skip
    done = run_cli(args, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [
        load_result(job) for job in sorted(tmp_path.glob("*/")) if (job / "result.json").exists()
    ]
    assert sorted(r["steps"] for r in results) == [33, 132]
    assert {r["samples_seen"] for r in results} == {3 * 1408}
    assert "## Convergence: held-out accuracy" in done.stdout


@pytest.mark.slow
def test_the_lr_scaling_cpu_study_says_where_accuracy_held(tmp_path):
    done = run_cli(["-m", "+experiment=lr_scaling_cpu", f"hydra.sweep.dir={tmp_path}"], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    held = [line for line in done.stdout.splitlines() if ": held up to global batch" in line]
    assert {line.split(":")[0] for line in held} == {
        "- scaling=none", "- scaling=linear", "- scaling=sqrt"
    }  # fmt: skip
    # Each rule against no scaling, paired by seed, speed and accuracy in one verdict: at
    # global batch 32 every rule is the base rate, so training is the same to the last bit;
    # at 512 the linear rule's 16x rate diverges.
    verdicts = {x.split(": ")[0] + ": " + x.split(": ")[1]: x for x in done.stdout.splitlines()
                if " vs none: " in x}  # fmt: skip
    assert len(verdicts) == 6, verdicts
    same = verdicts["- at batch=16: scaling=linear vs none"]
    assert "paired" in same and "accuracy equal within ±0.5 points (0.0 [0.0, 0.0] points)" in same
    diverged = verdicts["- at batch=256: scaling=linear vs none"]
    drop = re.search(r"accuracy (?:lower by |undecided \()-?(\d+\.\d)", diverged)
    assert drop and float(drop.group(1)) > 20, diverged  # 3 seeds: its interval may hold 0
    assert "hold together" in done.stdout  # six verdicts, Bonferroni


def _study(rng, drops: dict[int, float], seeds: int = 3) -> list:
    """Three rules at four batches, held-out accuracy 90 % less ``drops[batch]``, sd 1 point."""
    return [
        {
            "job": f"batch={b},scaling={rule},seed={s}", "status": "completed", "data": "digits",
            "settings": {"batch": b, "scaling": rule, "seed": s}, "seed": s,
            "global_batch": 2 * b,
            "metrics": {"samples_per_sec": 1.0, "eval_accuracy": 0.9 - drops.get(b, 0.0)
                        + rng.gauss(0, 0.01)},
        }
        for rule in ("none", "linear", "sqrt")
        for b in (8, 16, 32, 64)
        for s in range(seeds)
    ]  # fmt: skip


def _judged(results: list) -> list:
    from linkbench.analysis.convergence import rules
    from linkbench.analysis.sweep import group, swept_keys

    return rules(group(results, swept_keys(results)), tolerance=0.01)


def test_convergence_is_a_statement_with_its_error():
    """Before: point means, so with the same accuracy at every batch a sweep named a batch
    that did not hold in 17-49 % of sweeps. Now: with equal accuracy no batch is called lower
    in more than 5 % of sweeps, and a batch 3 points lower is said to hold in at most 5 %."""
    import math
    import random

    rng = random.Random(3)
    sweeps = 600
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / sweeps)
    lower = sum(
        any(s.verdict == "lower" for r in _judged(_study(rng, {})) for s in r.steps)
        for _ in range(sweeps)
    )
    assert lower / sweeps <= bound
    wrongly_held = sum(
        any(r.held_up_to == 128 for r in _judged(_study(rng, {64: 0.03}))) for _ in range(sweeps)
    )
    assert wrongly_held / sweeps <= bound
    # Every larger batch truly 0.9 points lower, inside the 1-point tolerance: before, each
    # batch was tested for "lower" at the rule's full level, outside the fixed sequence, and
    # some batch was called lower in 10.6 % (3 seeds) and 6.9 % (10 seeds) of sweeps.
    for seeds in (3, 10):
        near = {16: 0.009, 32: 0.009, 64: 0.009}
        wrongly_lower = sum(
            any(s.verdict == "lower" for r in _judged(_study(rng, near, seeds)) for s in r.steps)
            for _ in range(sweeps)
        )
        assert wrongly_lower / sweeps <= bound, (seeds, wrongly_lower)
    shown = [r.held_up_to for r in _judged(_study(random.Random(9), {}, seeds=30))]
    assert shown == [128, 128, 128], "with enough seeds, equal accuracy is shown to hold"
