"""The comparison statistics on simulated runs with known answers: coverage, A/A verdicts,
power, and intervals that narrow as runs are added."""

from __future__ import annotations

import math
import random

import pytest

from linkbench.analysis.stats import (
    Ratio,
    mean_interval,
    ratio_interval,
    verdict,
)

SIMULATIONS = 500


def simulate(
    rng: random.Random, true_ratio: float, runs: int, noise: float, drift: float, paired: bool
) -> Ratio:
    """Interleaved rounds: round r runs the baseline and the arm back to back; the machine
    drifts by ``drift`` per round (both arms alike) and each run has lognormal ``noise``."""
    base, arm, pairs = [], [], []
    for r in range(runs):
        machine = 1000.0 * (1 + drift * r)
        b = machine * math.exp(rng.gauss(0, noise))
        a = machine * true_ratio * math.exp(rng.gauss(0, noise))
        base.append(b)
        arm.append(a)
        pairs.append((a, b))
    return ratio_interval(arm, base, pairs if paired else ())


@pytest.mark.parametrize("paired", [True, False], ids=["paired", "welch"])
@pytest.mark.parametrize("true_ratio", [1.0, 1.05, 0.8])
def test_the_interval_covers_the_true_ratio(paired, true_ratio):
    rng = random.Random(7)
    covered = 0
    for _ in range(SIMULATIONS):
        ratio = simulate(rng, true_ratio, runs=3, noise=0.02, drift=0.01, paired=paired)
        covered += ratio.low <= true_ratio <= ratio.high
    assert covered / SIMULATIONS >= 0.90


A_A_REGIMES = [
    (runs, noise, paired)
    for runs in (2, 3, 5, 10)
    for noise in (0.005, 0.01, 0.03)
    for paired in (True, False)
]
# A 95 % interval excludes the truth in 5 % of comparisons; 500 simulations measure that
# rate to within a binomial standard error of about 1 %, so one regime may read up to three
# standard errors above 5 % by chance; over all regimes together the rate must be <= 5 %.
ONE_REGIME_LIMIT = 0.05 + 3 * math.sqrt(0.05 * 0.95 / SIMULATIONS)


def a_a_false_verdicts(runs: int, noise: float, paired: bool) -> int:
    rng = random.Random(runs * 1000 + round(noise * 1e4) + paired)
    ratios = (
        simulate(rng, 1.0, runs, noise, drift=0.02, paired=paired) for _ in range(SIMULATIONS)
    )
    return sum(verdict(ratio) in ("faster", "slower") for ratio in ratios)


@pytest.mark.parametrize(("runs", "noise", "paired"), A_A_REGIMES)
def test_an_a_a_comparison_is_equal_or_inconclusive(runs, noise, paired):
    assert a_a_false_verdicts(runs, noise, paired) / SIMULATIONS <= ONE_REGIME_LIMIT


def test_a_a_false_verdicts_stay_at_most_five_percent_over_all_regimes():
    wrong = sum(a_a_false_verdicts(*regime) for regime in A_A_REGIMES)
    assert wrong / (SIMULATIONS * len(A_A_REGIMES)) <= 0.05


def test_a_real_difference_is_found_and_named():
    rng = random.Random(3)
    found = [verdict(simulate(rng, 1.10, 3, 0.01, 0.01, True)) for _ in range(SIMULATIONS)]
    assert found.count("faster") / SIMULATIONS >= 0.95
    slow = [verdict(simulate(rng, 0.9, 3, 0.01, 0.0, False)) for _ in range(SIMULATIONS)]
    assert slow.count("slower") / SIMULATIONS >= 0.95
    # For a time, lower is better: a ratio of 0.9 is faster.
    assert verdict(simulate(rng, 0.9, 5, 0.001, 0.0, True), higher_is_better=False) == "faster"


def test_more_runs_narrow_the_interval_and_settle_equal():
    rng = random.Random(5)

    def width(runs: int) -> float:
        widths = [
            math.log(r.high / r.low)
            for r in (simulate(rng, 1.0, runs, 0.01, 0.0, False) for _ in range(200))
        ]
        return sum(widths) / len(widths)

    assert width(10) < width(5) < width(3)
    settled = [verdict(simulate(rng, 1.0, 20, 0.005, 0.0, True)) for _ in range(100)]
    assert settled.count("equal") >= 95


def test_one_run_each_has_no_interval_and_is_inconclusive():
    ratio = ratio_interval([1100.0], [1000.0])
    assert ratio.method == "none" and ratio.estimate == pytest.approx(1.1)
    assert verdict(ratio) == "inconclusive"


def test_one_run_on_one_side_gives_no_interval_and_no_verdict():
    """A side's single run has no spread: no interval borrows the other side's (a verdict
    from one run of a job killed part-way once read 1.539x faster in an A/A sweep)."""
    ratio = ratio_interval([1100.0], [990.0, 1000.0, 1010.0])
    assert ratio.method == "none" and ratio.estimate == pytest.approx(1.1, rel=0.01)
    assert verdict(ratio) == "inconclusive"
    assert ratio_interval([990.0, 1000.0], [1100.0]).method == "none"


def test_mean_interval_is_students_on_the_scale_of_the_values():
    # Values that can be negative (a comm fraction): the arithmetic mean and Student's t.
    mean = mean_interval([-0.1, 0.1, 0.3], geometric=False)
    assert mean.mean == pytest.approx(0.1)
    # t(0.975, 2) = 4.303; sd = 0.2; half = 4.303 * 0.2 / sqrt(3)
    assert mean.high - mean.mean == pytest.approx(4.303 * 0.2 / math.sqrt(3), rel=1e-3)
    # Throughputs: the geometric mean, its interval on the log scale (never below zero).
    rate = mean_interval([10.0, 1000.0])
    assert rate.mean == pytest.approx(100.0) and 0 < rate.low < 10 and rate.high > 1000
    assert mean_interval([5.0]).low == 5.0


def test_every_other_round_runs_in_reverse_order():
    from linkbench.launcher.sweeper import alternate_rounds

    jobs = [[f"round={r}", f"arm={a}"] for r in range(3) for a in "abc"]
    ordered = [f"{job[0][-1]}{job[1][-1]}" for job in alternate_rounds(jobs, 3)]
    assert ordered == ["0a", "0b", "0c", "1c", "1b", "1a", "2a", "2b", "2c"]
    assert alternate_rounds(jobs, 1) == jobs
