"""Comparisons with confidence intervals and a verdict that survives an A/A test.

A comparison is the ratio of an arm's geometric mean to its baseline's (samples/s, or any
metric), estimated from independent **runs** (each a fresh world of processes; the timing
windows inside one run are not independent). The 95 % confidence interval is a t-interval on the
logarithm of the ratio, so it is symmetric for speed-ups and slow-downs:

- **paired**, when both arms ran in the same rounds of an interleaved sweep (round r of the
  arm beside round r of the baseline): Student's t on the per-round log ratios, n-1 degrees
  of freedom, so slow drift of the machine shared by a round cancels;
- **Welch**, otherwise: the difference of the mean log values with Welch's standard error and
  the Welch-Satterthwaite degrees of freedom (B. L. Welch, "The generalization of
  'Student's' problem when several different population variances are involved",
  Biometrika 34, 1947). With one run on one side, that side borrows the other's variance.

Comparing two alternatives from repeated measurements with a confidence interval, and
calling them different only when the interval excludes no difference, is the method of
R. Jain, "The Art of Computer Systems Performance Analysis" (Wiley, 1991), ch. 13; T.
Kalibera and R. Jones, "Rigorous Benchmarking in Reasonable Time" (ISMM 2013) argue for
intervals over runs rather than over iterations inside a run.

In an adaptive sweep (``repeats=auto``), which looks at its verdicts after every round and
stops when they are decided, the paired interval is a repeated confidence interval of a
group-sequential design instead (:mod:`linkbench.analysis.sequential`), wide enough that
looking after every round keeps the 95 %.

The verdict adds a practical margin (2 % by default): ``faster`` or ``slower`` when the
interval excludes 1 and the estimate lies outside ±margin; ``equal`` when the whole interval
lies inside ±margin; ``inconclusive`` otherwise. More runs narrow the interval; they never
push a verdict toward "noise". An earlier "about N runs per arm would decide it", computed
from the spread seen so far, decided a real 5 % difference only half the time at the N it
advised (the spread of a few runs is itself noisy); adaptive rounds replace it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

import numpy as np
from numpy.typing import ArrayLike

from linkbench.analysis.sequential import Design

CONFIDENCE = 0.95
MIN_INTERVAL_RUNS = 3
"""Runs a mean needs for its interval to be shown (:attr:`Mean.has_interval`)."""
DEFAULT_MARGIN = 0.02
MAX_EXPONENT = math.log(1.7e308)  # the largest x whose e**x is a float
VERDICTS = ("faster", "slower", "equal", "inconclusive")


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval, from independent runs of two arms."""

    estimate: float
    low: float
    high: float
    runs: tuple[int, int]
    """Runs of the arm and of the baseline."""
    method: str
    """"paired" (rounds of one sweep), "sequential" (paired, the repeated interval of an
    adaptive sweep), "welch", or "none" (too few runs for an interval)."""
    sd: float | None
    """Standard deviation of one run's value (of one round's difference, when paired), on
    the scale the interval was computed on (the log scale for ratios)."""
    pairs: int = 0
    """Rounds (or seeds) paired in a paired or sequential interval; 0 otherwise."""

    @property
    def has_interval(self) -> bool:
        return self.method != "none"


# A ratio is an Interval computed on log values, then exponentiated.
Ratio = Interval


@dataclass(frozen=True)
class Mean:
    """A mean over runs with its t-interval (low = high = mean with one run)."""

    mean: float
    low: float
    high: float
    runs: int

    @property
    def has_interval(self) -> bool:
        """Whether the interval says something: from :data:`MIN_INTERVAL_RUNS` runs on, and
        finite. Two runs give a t-interval of one degree of freedom, 12.7 standard errors
        wide each way, which says only that there were two; every place that shows a
        mean shows its interval only where this holds."""
        return self.runs >= MIN_INTERVAL_RUNS and math.isfinite(self.low + self.high)


def _t(df: float, confidence: float = CONFIDENCE) -> float:
    from scipy.special import stdtrit  # Student's t quantile (imported when first used)

    return float(stdtrit(df, 0.5 + confidence / 2))


def mean_interval(
    values: Sequence[float], geometric: bool = True, confidence: float = CONFIDENCE
) -> Mean:
    """The mean of ``values`` and its t-interval: for rates and times (``geometric``, all
    positive) the geometric mean with a t-interval on the log scale, the scale ratios are
    taken on; otherwise (accuracies, fractions) the arithmetic mean and Student's t."""
    n = len(values)
    if n == 1:
        return Mean(values[0], values[0], values[0], 1)
    positive = geometric and min(values) > 0
    scaled = [math.log(v) for v in values] if positive else list(values)
    mean = statistics.fmean(scaled)
    half = _t(n - 1, confidence) * statistics.stdev(scaled) / math.sqrt(n)
    if positive:
        return Mean(_exp(mean), _exp(mean - half), _exp(mean + half), n)
    return Mean(mean, mean - half, mean + half, n)


def difference_interval(
    arm: Sequence[float],
    baseline: Sequence[float],
    pairs: Sequence[tuple[float, float]] = (),
    confidence: float = CONFIDENCE,
    design: Design | None = None,
) -> Interval:
    """mean(arm) - mean(baseline) with its interval: paired t over ``pairs`` (values of the
    same round) when there are two or more, else Welch's t, which needs two runs on each
    side (with fewer: no interval). Under an adaptive sweep's ``design``, the paired interval
    is its repeated confidence interval."""
    runs = (len(arm), len(baseline))
    if len(pairs) >= 2:
        diffs = [a - b for a, b in pairs]
        sd = statistics.stdev(diffs)
        n = len(diffs)
        bound = design.t_bound(n, confidence) if design is not None else _t(n - 1, confidence)
        method = "paired" if design is None else "sequential"
        half = bound * sd / math.sqrt(n)
        return _interval(statistics.fmean(diffs), half, runs, method, sd, pairs=n)
    mean = statistics.fmean(arm) - statistics.fmean(baseline)
    var_a = statistics.variance(arm) if len(arm) > 1 else None
    var_b = statistics.variance(baseline) if len(baseline) > 1 else None
    if var_a is None or var_b is None:
        # One run on a side has no spread of its own: an interval that borrowed the other
        # side's would judge a run that may be unlike its configuration's (a disturbed or
        # cut-short one), so there is no interval and no verdict.
        return Interval(mean, mean, mean, runs, "none", None)
    se_a, se_b = var_a / len(arm), var_b / len(baseline)
    if se_a + se_b == 0:
        return _interval(mean, 0.0, runs, "welch", 0.0)
    half = _t(welch_df(se_a, se_b, len(arm), len(baseline)), confidence) * math.sqrt(se_a + se_b)
    return _interval(mean, half, runs, "welch", math.sqrt((var_a + var_b) / 2))


def welch_df(se_a: float, se_b: float, n_a: int, n_b: int) -> float:
    """The degrees of freedom of a Welch interval: Welch-Satterthwaite's, but never more
    than that formula gives at equal spreads for these run counts. Satterthwaite's own,
    estimated from the runs' variances, is too large whenever the side with few runs
    happens to vary little, and so too narrow: two A/A sweeps of 3 and 8 runs (four
    configurations, Holm) named a winner in 7.2 % of pairs, 2 and 8 runs in 14.9 %; with
    the cap 1.4 % and 0.0 % (benchmarks/unequal_runs.py), equal runs unchanged."""
    satterthwaite = (se_a + se_b) ** 2 / (se_a**2 / (n_a - 1) + se_b**2 / (n_b - 1))
    w_a, w_b = 1 / n_a, 1 / n_b
    equal_spreads = (w_a + w_b) ** 2 / (w_a**2 / (n_a - 1) + w_b**2 / (n_b - 1))
    return min(satterthwaite, equal_spreads)


def _interval(
    mean: float, half: float, runs: tuple[int, int], method: str, sd: float, pairs: int = 0
) -> Interval:
    return Interval(mean, mean - half, mean + half, runs, method, sd, pairs)


class IntervalOptions(TypedDict, total=False):
    """How an interval is taken: its confidence, and an adaptive sweep's design."""

    confidence: float
    design: Design | None


def ratio_interval(
    arm: Sequence[float],
    baseline: Sequence[float],
    pairs: Sequence[tuple[float, float]] = (),
    **options: Unpack[IntervalOptions],
) -> Interval:
    """The ratio of geometric means, the difference of mean log values exponentiated (values
    must be positive: throughputs, times); ``options`` as :func:`difference_interval`'s."""
    if min([*arm, *baseline]) <= 0:
        raise ValueError("ratios need positive values")
    log_pairs = [(math.log(a), math.log(b)) for a, b in pairs]
    logs = [math.log(v) for v in arm], [math.log(v) for v in baseline]
    d = difference_interval(*logs, log_pairs, **options)
    return Interval(_exp(d.estimate), _exp(d.low), _exp(d.high), d.runs, d.method, d.sd, d.pairs)


def _exp(x: float) -> float:
    """e**x, and inf where that overflows: a sequential design's first looks have bounds of
    |t| in the thousands, so a ratio's upper end can be beyond any float."""
    return math.exp(x) if x < MAX_EXPONENT else math.inf


def verdict(ratio: Ratio, margin: float = DEFAULT_MARGIN, higher_is_better: bool = True) -> str:
    """faster, slower, equal or inconclusive (see the module's docstring)."""
    if not ratio.has_interval:
        return "inconclusive"
    return str(verdicts(ratio.estimate, ratio.low, ratio.high, margin, higher_is_better)[()])


def verdicts(
    estimate: ArrayLike,
    low: ArrayLike,
    high: ArrayLike,
    margin: float = DEFAULT_MARGIN,
    higher_is_better: bool = True,
) -> np.ndarray:
    """The verdict rule itself, element by element, on ratios with intervals: equal when the
    interval lies inside ±margin; faster or slower when it excludes 1 and the estimate lies
    outside ±margin; else inconclusive. :func:`verdict` applies it to one ratio and the
    simulations (:mod:`linkbench.analysis.simulate`) to arrays, so both judge by one rule."""
    estimate, low, high = np.asarray(estimate), np.asarray(low), np.asarray(high)
    equal = (low >= 1 - margin) & (high <= 1 + margin)
    outside = (estimate > 1 + margin) | (estimate < 1 - margin)
    decided = outside & ((low > 1) | (high < 1))
    better = (estimate > 1) == higher_is_better
    winner = np.where(better, "faster", "slower")
    return np.where(equal, "equal", np.where(decided, winner, "inconclusive"))
