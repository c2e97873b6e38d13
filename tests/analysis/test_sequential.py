"""Adaptive rounds on simulated sweeps with known answers: the A/A false-verdict rate under
optional stopping, coverage of the interval where a sweep stopped, and power, in the noise
regimes a benchmark machine has (normal and lognormal noise at CV 1, 5 and 15 %, heavy tails,
a drifting machine).

A simulated sweep is the rule the sweeper applies: after every round, the paired repeated
interval of :mod:`linkbench.analysis.sequential` and the verdict of
:func:`linkbench.analysis.stats.verdict`; it stops at the first decided verdict. The sweeps
are vectorised (:mod:`linkbench.analysis.simulate`, 20,000 per regime), and one test checks
that the vectorised interval is the library's own."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from linkbench.analysis.sequential import (
    FIRST_LOOK,
    FUTILE_BELOW,
    Design,
    chance_to_decide,
    spent,
    t_boundaries,
)
from linkbench.analysis.simulate import simulate
from linkbench.analysis.stats import DEFAULT_MARGIN, ratio_interval, verdict

SWEEPS = 20_000
MAX_ROUNDS = 8
MIN_ROUNDS = 3  # the sweeper's default: its first look
SPENDINGS = ("obrien_fleming", "pocock", "hwang_shih_decani(-4)")
SWEEPER = Design(MAX_ROUNDS, min_rounds=MIN_ROUNDS)  # the default design a sweep runs
# A rate of exactly 5 % measured over SWEEPS simulated sweeps reads up to three binomial
# standard errors above it by chance.
AT_MOST_5 = 0.05 + 3 * math.sqrt(0.05 * 0.95 / SWEEPS)


def test_the_vectorised_sweep_is_the_librarys_rule():
    """The simulation's interval and verdict are those of ratio_interval(design=...) and
    verdict(), so what the tests below prove holds for the sweeper's rule."""
    design = Design(MAX_ROUNDS)
    rng = random.Random(3)
    for n in range(FIRST_LOOK, MAX_ROUNDS + 1):
        pairs = [(1000 * math.exp(rng.gauss(0.05, 0.03)), 1000.0) for _ in range(n)]
        ratio = ratio_interval([a for a, _ in pairs], [b for _, b in pairs], pairs, design=design)
        logs = np.log([a / b for a, b in pairs])
        half = design.t_bound(n) * logs.std(ddof=1) / math.sqrt(n)
        assert ratio.method == "sequential"
        assert ratio.low == pytest.approx(math.exp(logs.mean() - half))
        assert ratio.high == pytest.approx(math.exp(logs.mean() + half))
        assert verdict(ratio) in ("faster", "inconclusive")


def test_the_simulations_verdicts_are_the_librarys_at_every_look():
    """Verdict for verdict, not only the intervals: a change of the rule in stats moves the
    simulations with it (before, simulate carried a copy of the rule of its own)."""
    from linkbench.analysis.simulate import _look

    design = Design(MAX_ROUNDS)
    rng = np.random.default_rng(11)
    seen: set[str] = set()
    for n in range(FIRST_LOOK, MAX_ROUNDS + 1):
        # truths on both sides of 1 and of the margin, spreads from tight to loose
        logs = rng.normal(rng.uniform(-0.06, 0.06, (400, 1)), rng.uniform(0.001, 0.05, (400, 1)),
                          (400, n))  # fmt: skip
        now, *_ = _look(logs, design, DEFAULT_MARGIN)
        for row, simulated in zip(logs, now, strict=True):
            arm = list(1000 * np.exp(row))
            base = [1000.0] * n
            ratio = ratio_interval(arm, base, list(zip(arm, base, strict=True)), design=design)
            assert (simulated or "inconclusive") == verdict(ratio), (n, row)
        seen |= set(now)
    assert seen == {"equal", "faster", "slower", ""}, "every verdict was tried"


@pytest.mark.parametrize("spending", SPENDINGS)
@pytest.mark.parametrize("min_rounds", [2, MIN_ROUNDS])
def test_the_boundaries_spend_the_error_as_designed(spending, min_rounds):
    """Independent A/A sweeps (another seed than the boundaries') cross first at each look in
    the share the spending function gives it, and at any look in 5 %; a look before
    min_rounds, where the sweeper cannot stop, spends nothing (before, look 2 of 8 spent
    0.14 % under O'Brien-Fleming that the sweeper never acted on)."""
    bounds = np.array(t_boundaries(MAX_ROUNDS, spending, first_look=min_rounds))
    assert Design(MAX_ROUNDS, spending, min_rounds).t_bound(min_rounds - 1) == math.inf
    rng = np.random.default_rng(11)
    diffs = rng.standard_normal((200_000, MAX_ROUNDS))
    first = np.full(len(diffs), -1)
    for i, n in enumerate(range(FIRST_LOOK, MAX_ROUNDS + 1)):
        seen = diffs[:, :n]
        t = np.abs(seen.mean(axis=1)) / (seen.std(axis=1, ddof=1) / math.sqrt(n))
        first[(first < 0) & (t >= bounds[i])] = i
    assert (first >= 0).mean() == pytest.approx(0.05, abs=0.002)
    for i, n in enumerate(range(FIRST_LOOK, MAX_ROUNDS + 1)):
        share = spent(n / MAX_ROUNDS, 0.05, spending) if n >= min_rounds else 0.0
        share -= spent((n - 1) / MAX_ROUNDS, 0.05, spending) if n > min_rounds else 0
        assert (first == i).mean() == pytest.approx(share, abs=0.0015), n


def test_hwang_shih_decanis_family_spans_the_other_two():
    """gamma -4 spends late, as O'Brien-Fleming does, 1 about as Pocock does; 0 evenly."""
    for t in (0.25, 0.5, 0.75):
        assert spent(t, 0.05, "hwang_shih_decani(0)") == pytest.approx(0.05 * t)
        late, even = spent(t, 0.05, "hwang_shih_decani(-4)"), spent(t, 0.05, "pocock")
        assert max(late, spent(t, 0.05, "obrien_fleming")) < 0.05 * t < even
        assert spent(t, 0.05, "hwang_shih_decani(1)") == pytest.approx(even, rel=0.1)
    assert spent(1.0, 0.05, "hwang_shih_decani(-4)") == pytest.approx(0.05)


A_A_REGIMES = [
    *[(kind, cv, 0.0, 0.0) for kind in ("normal", "lognormal") for cv in (0.01, 0.05, 0.15)],
    *[("normal", cv, 0.1, 0.0) for cv in (0.01, 0.05, 0.15)],  # 10 % of runs at 1.5x
    *[("normal", cv, 0.0, 0.1) for cv in (0.01, 0.05, 0.15)],  # 10 % drift over the sweep
]


@pytest.mark.parametrize("spending", SPENDINGS)
@pytest.mark.parametrize(("kind", "cv", "tail", "drift"), A_A_REGIMES)
def test_an_a_a_sweep_that_stops_when_decided_rarely_picks_a_winner(
    spending, kind, cv, tail, drift
):
    design = Design(MAX_ROUNDS, spending, MIN_ROUNDS)
    verdicts, _, _, _ = simulate(1.0, cv, design, kind, tail, drift)
    assert np.isin(verdicts, ["faster", "slower"]).mean() <= AT_MOST_5


def test_optional_stopping_with_plain_intervals_would_pick_winners():
    """What the repeated intervals prevent: stopping at the first plain 95 % interval that
    excludes 1 reads faster or slower in far more than 5 % of A/A sweeps."""
    verdicts, _, _, _ = simulate(1.0, 0.05, Design(MAX_ROUNDS), plain=True)
    assert np.isin(verdicts, ["faster", "slower"]).mean() > 0.12


@pytest.mark.parametrize("cv", [0.01, 0.05, 0.15])
def test_the_interval_where_a_sweep_stopped_covers_the_true_ratio(cv):
    _, _, low, high = simulate(1.05, cv, SWEEPER, seed=5)
    assert ((low <= 1.05) & (high >= 1.05)).mean() >= 0.93


def test_a_real_ten_percent_difference_is_decided_within_eight_rounds():
    verdicts, stopped, _, _ = simulate(1.10, 0.05, SWEEPER, seed=9)
    assert ((verdicts == "faster") & (stopped <= 8)).mean() >= 0.80
    assert stopped.mean() < MAX_ROUNDS  # and, on average, before the last round


def test_an_equal_pair_on_a_quiet_machine_is_called_equal_before_the_last_round():
    verdicts, stopped, _, _ = simulate(1.0, 0.01, SWEEPER, seed=13)
    assert (verdicts == "equal").mean() >= 0.7
    assert np.median(stopped[verdicts == "equal"]) < MAX_ROUNDS


def test_a_first_look_at_two_far_apart_rounds_is_an_interval_not_an_overflow():
    """A 2-core CI sweep once crashed here: the first look's |t| bound times a large spread
    of log ratios is beyond exp's range. The interval is then unbounded above, undecided."""
    assert Design(MAX_ROUNDS).t_bound(2) > 1_000
    arm, base = [3000.0, 1500.0], [1600.0, 3100.0]
    ratio = ratio_interval(arm, base, list(zip(arm, base, strict=True)), design=Design(MAX_ROUNDS))
    assert ratio.low == 0.0 and ratio.high == math.inf
    assert verdict(ratio) == "inconclusive"


def test_an_a_a_pair_on_a_noisy_machine_stops_for_futility_long_before_the_last_round():
    """At CV 10 % a ±2 % margin cannot be met in 8 rounds: without the futility stop such a
    sweep runs to the end; with it, it stops about half way, and no more often wrongly."""
    design = Design(MAX_ROUNDS)
    verdicts, stopped, _, _ = simulate(1.0, 0.10, design, seed=21)
    _, always, _, _ = simulate(1.0, 0.10, design, seed=21, futility=False)
    assert always.mean() > 7.5 and stopped.mean() < 5.5
    assert np.isin(verdicts, ["faster", "slower"]).mean() <= 0.05


def test_the_chance_to_decide_is_high_for_a_clear_effect_and_low_for_none_in_the_noise():
    design = Design(MAX_ROUNDS)
    assert chance_to_decide(math.log(1.10), 0.05, 4, design, DEFAULT_MARGIN) > 0.9
    assert chance_to_decide(0.0, 0.005, 4, design, DEFAULT_MARGIN) > 0.95  # equal, surely
    assert chance_to_decide(0.0, 0.10, 4, design, DEFAULT_MARGIN) < FUTILE_BELOW
    assert chance_to_decide(0.0, 0.10, MAX_ROUNDS, design, DEFAULT_MARGIN) == 0.0  # no rounds left


@pytest.mark.parametrize(
    ("ratio", "cv"), [(1.10, 0.05), (1.05, 0.02), (1.0, 0.01), (1.02, 0.02), (1.0, 0.05)]
)
def test_the_printed_chance_to_decide_is_calibrated_and_the_futility_stop_costs_little(ratio, cv):
    """Before (conditional power at the rounds seen): at a real 10 % difference at CV 5 % the
    comparisons stopped as beyond deciding were printed a 1.8 % chance and 10.4 % of them
    would have been decided by round 8; A/A at CV 1 %: printed 1.5 %, actually 21-23 %, and
    5 points of power lost. Now, on the same data run on to round 8 without the rule."""
    from linkbench.analysis.simulate import futility_study

    printed, decided_on, decided_by_rule = futility_study(ratio, cv, SWEEPER, seed=3, sweeps=6000)
    stopped = ~np.isnan(printed)
    if stopped.sum() >= 100:
        assert abs(decided_on[stopped].mean() - printed[stopped].mean()) <= 0.04
    assert decided_on.mean() - decided_by_rule.mean() <= 0.02, "power the rule costs"
