"""Simulated comparisons of an adaptive sweep with a truth we choose, run by the sweeper's
own rule: the check of the statistics (``tests/analysis/test_sequential.py``) and the
measure of what a design costs (``benchmarks/spending.py``), each figure printed with its
standard error (:func:`with_se`).

A simulated comparison is an arm and its baseline run once per round, the order reversed in
odd rounds as the sweeper runs them. After every round from the design's first look it
takes the paired repeated interval of :mod:`linkbench.analysis.sequential` and the verdict
of :func:`linkbench.analysis.stats.verdict` (vectorised here; a test checks that the
interval is the library's own), and stops at the first decided verdict, or for futility
where the sweeper would (:attr:`linkbench.analysis.compare.Comparison.futile`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from linkbench.analysis.sequential import (
    FIRST_FUTILITY_LOOK,
    FIRST_LOOK,
    FUTILE_BELOW,
    Design,
    chance_to_decide,
)
from linkbench.analysis.stats import DEFAULT_MARGIN
from linkbench.analysis.stats import verdicts as stats_verdicts

# Futures per simulated comparison for its chance to be decided (the sweeper takes 2,000 for
# the one it prints; 100 keep 20,000 comparisons within seconds, the rule's power the same).
DRAWS = 100


def with_se(values: Any, percent: bool = True) -> str:
    """The mean of simulated ``values`` with its standard error (SD / sqrt(n)) beside it, as
    the docs print every simulated figure: a percentage for shares (0/1 values, or each
    sweep's fraction), plain for counts such as rounds (``percent=False``)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return ""
    se = float(x.std(ddof=1)) / math.sqrt(x.size) if x.size > 1 else float("nan")
    if percent:
        return f"{100 * x.mean():.1f} ± {100 * se:.1f} %"
    return f"{x.mean():.2f} ± {se:.2f}"


def noise(rng: np.random.Generator, cv: float, kind: str, shape: tuple[int, int]) -> np.ndarray:
    """Multiplicative run-to-run noise of mean 1 and coefficient of variation ``cv``:
    ``normal`` (floored at 0.001) or ``lognormal``."""
    if kind == "normal":
        return np.maximum(1 + cv * rng.standard_normal(shape), 1e-3)
    sigma = math.sqrt(math.log(1 + cv * cv))
    return np.exp(sigma * rng.standard_normal(shape) - sigma**2 / 2)


def simulate(
    true_ratio: float,
    cv: float,
    design: Design,
    kind: str = "normal",
    tail: float = 0.0,
    drift: float = 0.0,
    seed: int = 0,
    plain: bool = False,
    futility: bool = True,
    sweeps: int = 20_000,
    margin: float = DEFAULT_MARGIN,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(verdicts, rounds run, low, high) of ``sweeps`` simulated comparisons whose arm runs
    ``true_ratio`` times the baseline's throughput.

    ``tail``: that share of runs takes 1.5x as long; ``drift``: the machine slows linearly
    by that fraction from the first job to the last; ``plain``: each look's plain 95 %
    t-interval instead of the repeated one; ``futility``: from FIRST_FUTILITY_LOOK (and the
    first look) a comparison whose chance to be decided is below FUTILE_BELOW stops
    undecided, as the sweeper's does."""
    rng = np.random.default_rng(seed)
    log_ratios = _log_ratios(rng, true_ratio, cv, design.max_rounds, kind, tail, drift, sweeps)
    return decide(log_ratios, design, plain=plain, futility=futility, margin=margin)


def decide(
    log_ratios: np.ndarray,
    design: Design,
    plain: bool = False,
    futility: bool = True,
    margin: float = DEFAULT_MARGIN,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(verdicts, rounds run, low, high) of the sweeper's rule on given paired log ratios
    (comparisons x ``design.max_rounds`` rounds, the arm's over its baseline's): what
    :func:`simulate` runs on its own noise, for a study that draws the runs another way."""
    sweeps, k = log_ratios.shape[0], design.max_rounds
    verdicts = np.full(sweeps, "inconclusive", dtype=object)
    stopped = np.full(sweeps, k)
    low, high = np.full(sweeps, np.nan), np.full(sweeps, np.nan)
    running = np.ones(sweeps, dtype=bool)
    first = FIRST_LOOK if plain else design.first_look
    for n in range(first, k + 1):
        now, lo, hi, mean, sd = _look(log_ratios[:, :n], design, margin, plain)
        low[running], high[running] = lo[running], hi[running]
        newly = running & (now != "")
        verdicts[newly], stopped[newly] = now[newly], n
        running &= ~newly
        if futility and FIRST_FUTILITY_LOOK <= n < k:
            chance = _chances(mean, sd, running, n, design, margin)
            futile = running & (chance < FUTILE_BELOW)
            stopped[futile] = n
            running &= ~futile
    return verdicts, stopped, low, high


def _chances(
    mean: np.ndarray,
    sd: np.ndarray,
    which: np.ndarray,
    n: int,
    design: Design,
    margin: float,
    draws: int = DRAWS,
) -> np.ndarray:
    """The chance to be decided of the comparisons ``which`` selects (1 for the others)."""
    chance = np.ones(len(mean))
    if which.any():
        chance[which] = chance_to_decide(mean[which], sd[which], n, design, margin, draws=draws)
    return chance


def _log_ratios(
    rng: np.random.Generator,
    true_ratio: float,
    cv: float,
    k: int,
    kind: str,
    tail: float,
    drift: float,
    sweeps: int,
) -> np.ndarray:
    """Each simulated comparison's k paired log ratios, the arm first in even rounds."""
    order = np.arange(2 * k).reshape(k, 2)
    arm_slot = np.where(np.arange(k) % 2 == 0, order[:, 0], order[:, 1])
    base_slot = np.where(np.arange(k) % 2 == 0, order[:, 1], order[:, 0])

    def runs(slot: np.ndarray) -> np.ndarray:
        x = noise(rng, cv, kind, (sweeps, k))
        x = np.where(rng.random((sweeps, k)) < tail, x / 1.5, x)
        return x * (1 - drift * slot / (2 * k - 1))

    return np.log(true_ratio * runs(arm_slot)) - np.log(runs(base_slot))


def _look(
    seen: np.ndarray, design: Design, margin: float, plain: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One look at ``seen`` (comparisons x pairs): (verdict or "", low, high, mean, sd)."""
    n = seen.shape[1]
    mean, sd = seen.mean(axis=1), seen.std(axis=1, ddof=1)
    bound = float(stats.t.ppf(0.975, n - 1)) if plain else design.t_bound(n)
    half = np.minimum(bound * sd / math.sqrt(n), 50.0)  # exp() of no overflow
    lo, hi, est = np.exp(mean - half), np.exp(mean + half), np.exp(mean)
    now = stats_verdicts(est, lo, hi, margin)
    return np.where(now == "inconclusive", "", now), lo, hi, mean, sd


def futility_study(
    true_ratio: float,
    cv: float,
    design: Design,
    seed: int = 0,
    sweeps: int = 20_000,
    margin: float = DEFAULT_MARGIN,
    kind: str = "lognormal",
    draws: int = 400,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What the futility rule says and what it costs, on the same data: (the chance printed
    where the rule first stops a comparison, NaN where it never does; whether the last look
    decides it when it runs on; whether it is decided under the rule). ``draws``: futures per
    comparison for its chance (the sweeper takes 2,000; fewer make the estimate coarser and
    the rule stop more often by chance)."""
    rng = np.random.default_rng(seed)
    k = design.max_rounds
    log_ratios = _log_ratios(rng, true_ratio, cv, k, kind, 0.0, 0.0, sweeps)
    printed = np.full(sweeps, np.nan)
    decided_on = np.zeros(sweeps, dtype=bool)
    undecided = np.ones(sweeps, dtype=bool)  # by the rule alone, no futility yet
    for n in range(design.first_look, k + 1):
        now, _, _, mean, sd = _look(log_ratios[:, :n], design, margin)
        newly = undecided & (now != "")
        decided_on |= newly
        undecided &= ~newly
        if FIRST_FUTILITY_LOOK <= n < k:
            open_ = undecided & np.isnan(printed)
            chance = _chances(mean, sd, open_, n, design, margin, draws)
            first = open_ & (chance < FUTILE_BELOW)
            printed[first] = chance[first]
    # A comparison the rule stopped had not been decided before it (printed is set only then).
    return printed, decided_on, decided_on & np.isnan(printed)
