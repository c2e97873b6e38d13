"""Repeated confidence intervals: adaptive rounds look at their verdicts after every round.

Looking after every round and stopping as soon as an interval excludes 1 inflates false
verdicts (optional stopping). Adaptive rounds (``repeats=auto``) therefore widen each look's
interval to a *repeated confidence interval* (C. Jennison and B. W. Turnbull, "Interim
analyses: the repeated confidence interval approach", J. R. Statist. Soc. B 51, 1989): the
intervals of every look cover the true ratio all together with probability 95 %, so a rule
that stops on them, and the interval where it stopped, keep that coverage.

The widths come from a group-sequential design over at most ``max_rounds`` rounds. The
alpha spending function of K. K. G. Lan and D. L. DeMets ("Discrete sequential boundaries
for clinical trials", Biometrika 70, 1983) spends the 5 % over the looks at information
fractions t = pairs / max_rounds, the looks starting at the sweeper's ``min_rounds`` (at
least two pairs, for a spread; earlier rounds, where it cannot stop, spend nothing):
O'Brien-Fleming's (Biometrics 35, 1979), the default, spends almost nothing early and most at
the last look, so a sweep that runs to its maximum loses little power; Pocock's (Biometrika
64, 1977) spends evenly and stops large effects sooner; Hwang, Shih and DeCani's family lies
between. At the same power O'Brien-Fleming runs the fewest rounds (``benchmarks/spending.py``,
table in docs/statistics.md). The spread of a round's log ratio is
estimated from the rounds themselves, so the boundaries are those of the paired *t*
statistic, whose joint law under no difference is the same whatever the spread (the
sequential t-test of Jennison and Turnbull, Biometrika 78, 1991): they are found by
simulating that law with a fixed seed, look by look, each boundary the quantile that makes
the paths crossing first at that look the share the spending function assigns to it.
Normal-theory z boundaries converted to t at their nominal levels would let 6 % of A/A
comparisons at 8 rounds read faster or slower; these keep it at 5 %.

A comparison that the remaining rounds would almost surely leave undecided is stopped for
futility (stochastic curtailment: K. K. G. Lan, R. Simon and M. Halperin, "Stochastically
curtailed tests in long-term clinical trials", Communications in Statistics C 1, 1982):
:func:`chance_to_decide` is the predictive power (D. J. Spiegelhalter, L. S. Freedman and
P. R. Blackburn, "Monitoring clinical trials: conditional or predictive power?", Controlled
Clinical Trials 7, 1986), the probability that a remaining look decides it (equal, faster or
slower), averaged over what the rounds so far leave uncertain of the true log ratio and its
spread; below :data:`FUTILE_BELOW`, from the look at :data:`FIRST_FUTILITY_LOOK` rounds on,
its jobs stop running. A futility stop never declares a difference, so it only lowers the
false-verdict rate (a non-binding futility rule). The conditional power at the rounds seen
(their mean and spread taken as the truth) printed chances 3 to 15 times too low and cost up
to 5 points of power where a spread was large by chance; ``benchmarks/futility.py`` measures
both the printed chance against what the last round would have decided and the power the
rule costs (docs/statistics.md).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from linkbench.files import read_rounds
from linkbench.sweep_defaults import DEFAULT_SPENDING

SPENDING = ("obrien_fleming", "pocock", "hwang_shih_decani(GAMMA)")
FIRST_LOOK = 2  # paired rounds: the first look with a spread
_HSD = re.compile(r"hwang_shih_decani\((-?\d+(?:\.\d+)?)\)")
PATHS = 400_000  # simulated A/A sweeps per design: the total error within ±0.001 (2 sd)
SEED = 20261203
FUTILE_BELOW = 0.05  # predictive power under which a comparison stops for futility
PREDICTIVE_DRAWS = 2_000  # futures simulated per comparison for its chance to be decided
PREDICTIVE_SEED = 20261205
# The first look that may stop for futility: with 3 pairs the spread has 2 degrees of freedom,
# too few to call a comparison hopeless (from 3, a real 10 % difference at CV 5 % was found
# in 82 % of simulated sweeps instead of 85 %; from 4, in 84 %).
FIRST_FUTILITY_LOOK = 4


def known_spending(spending: str) -> bool:
    """Whether ``spending`` names a spending function (:data:`SPENDING`; GAMMA a number)."""
    return spending in SPENDING[:2] or _HSD.fullmatch(spending) is not None


def spent(t: float, alpha: float, spending: str) -> float:
    """The error probability a design has spent by information fraction ``t`` (0 to 1):
    O'Brien-Fleming's and Pocock's in Lan and DeMets' forms, or the family of I. K. Hwang,
    W. J. Shih and J. S. DeCani ("Group sequential designs using a family of type I error
    probability spending functions", Stat. Med. 9, 1990), alpha (1 - e^(-gamma t)) /
    (1 - e^(-gamma)): gamma -4 spends about as O'Brien-Fleming does, 1 as Pocock does."""
    t = min(max(t, 0.0), 1.0)
    if t == 0:
        return 0.0
    if spending == "obrien_fleming":
        normal = NormalDist()
        return 2 - 2 * normal.cdf(normal.inv_cdf(1 - alpha / 2) / math.sqrt(t))
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    if hsd := _HSD.fullmatch(spending):
        gamma = float(hsd.group(1))
        if gamma == 0:
            return alpha * t
        return alpha * math.expm1(-gamma * t) / math.expm1(-gamma)
    raise ValueError(f"spending={spending!r}: choose one of {', '.join(SPENDING)}")


@lru_cache(maxsize=64)
def t_boundaries(
    max_rounds: int, spending: str, alpha: float = 0.05, first_look: int = FIRST_LOOK
) -> tuple[float, ...]:
    """|t| boundaries of the looks at 2, 3, ..., ``max_rounds`` paired rounds: under no
    difference, a sweep crosses first at each look with the probability the spending
    function assigns to it, and at any look with probability ``alpha``. Looks before
    ``first_look`` (where the sweeper cannot stop: its ``min_rounds``) spend nothing and
    have no boundary; the first look spends what the function has spent by then."""
    rng = np.random.default_rng(SEED)
    total = np.zeros(PATHS)  # running sums of each simulated sweep's paired differences
    squares = np.zeros(PATHS)
    alive = np.ones(PATHS, dtype=bool)  # sweeps that crossed no boundary yet
    bounds: list[float] = []
    for pairs in range(1, max_rounds + 1):
        diff = rng.standard_normal(PATHS)
        total += diff
        squares += diff**2
        if pairs < FIRST_LOOK:
            continue
        if pairs < first_look:
            bounds.append(math.inf)
            continue
        mean = total / pairs
        var = np.maximum(squares - pairs * mean**2, 1e-300) / (pairs - 1)
        t = np.abs(mean) / np.sqrt(var / pairs)
        before = spent((pairs - 1) / max_rounds, alpha, spending) if pairs > first_look else 0
        crossing = (spent(pairs / max_rounds, alpha, spending) - before) * PATHS
        survivors = t[alive]
        if crossing < 1 or survivors.size == 0:
            bounds.append(math.inf)
            continue
        bound = float(np.quantile(survivors, 1 - min(crossing / survivors.size, 1.0)))
        bounds.append(bound)
        alive &= t < bound
    return tuple(bounds)


def _first_look(min_rounds: int, max_rounds: int) -> int:
    """The first look of a design whose sweeper stops nothing before ``min_rounds``: a
    spread needs FIRST_LOOK pairs, and the last look is ``max_rounds``."""
    return max(FIRST_LOOK, min(min_rounds, max_rounds))


def t_bound(
    pairs: int,
    max_rounds: int,
    spending: str = DEFAULT_SPENDING,
    alpha: float = 0.05,
    first_look: int = FIRST_LOOK,
) -> float:
    """The |t| a comparison with ``pairs`` paired rounds must reach at this look; inf before
    the first look. Past ``max_rounds`` (a sweep continued), the last look's."""
    first_look = _first_look(first_look, max_rounds)
    if pairs < first_look:
        return math.inf
    bounds = t_boundaries(max(max_rounds, FIRST_LOOK), spending, alpha, first_look)
    return bounds[min(pairs, max_rounds) - FIRST_LOOK]


@dataclass(frozen=True)
class Design:
    """How an adaptive sweep looks at its comparisons: after every round from ``min_rounds``
    (the sweeper's: it stops nothing before; a spread needs two rounds) up to
    ``max_rounds``, spending its 5 % with ``spending``."""

    max_rounds: int
    spending: str = DEFAULT_SPENDING
    min_rounds: int = FIRST_LOOK

    @property
    def first_look(self) -> int:
        """The first round whose look may decide (and spends)."""
        return _first_look(self.min_rounds, self.max_rounds)

    def t_bound(self, pairs: int, confidence: float = 0.95) -> float:
        """The |t| at this look for intervals whose looks all hold with ``confidence``."""
        return t_bound(pairs, self.max_rounds, self.spending, 1 - confidence, self.min_rounds)

    def describe(self, confidence: float = 0.95) -> str:
        names = {"obrien_fleming": "O'Brien-Fleming", "pocock": "Pocock"}
        name = names.get(self.spending) or self.spending.replace("_", "-").title()
        return (
            f"repeated {100 * confidence:.4g} % confidence intervals of a "
            f"group-sequential design looking from round {self.first_look} to at most "
            f"{self.max_rounds} ({name} spending)"
        )


def chance_to_decide(
    mean: Any,
    sd: Any,
    pairs: int,
    design: Design,
    margin: float,
    confidence: float = 0.95,
    draws: int = PREDICTIVE_DRAWS,
) -> Any:
    """The predictive probability that a remaining look decides a comparison (equal, faster
    or slower) whose ``pairs`` paired log ratios so far have ``mean`` and ``sd`` (scalars or
    numpy arrays). Neither is taken as the truth: the true spread is drawn from its
    posterior given the rounds seen (a scaled inverse chi-square of ``pairs - 1`` degrees),
    the true mean from its own, and the rounds left are simulated from them, each look judged
    as the sweeper judges it (``draws`` futures per comparison, a fixed seed). 0 once the last
    look is past. Taking the rounds seen as the truth (conditional power) printed chances
    3 to 15 times too low where the spread seen so far was large by chance."""
    mean = np.atleast_1d(np.asarray(mean, dtype=float))
    sd = np.atleast_1d(np.asarray(sd, dtype=float))
    scalar = mean.shape == (1,) and np.ndim(np.asarray(sd)) <= 1 and len(sd) == 1
    last, n = design.max_rounds, pairs
    if n >= last or n < 2:
        out = np.zeros_like(mean)
        return float(out[0]) if scalar else out
    rng = np.random.default_rng(PREDICTIVE_SEED)
    low_edge, high_edge = math.log(1 - margin), math.log1p(margin)
    bounds = {look: design.t_bound(look, confidence) for look in range(n + 1, last + 1)}
    out = np.empty_like(mean)
    chunk = max(1, 4_000_000 // (draws * (last - n)))
    for start in range(0, len(mean), chunk):
        m = mean[start : start + chunk, None]
        v = np.broadcast_to(sd, mean.shape)[start : start + chunk, None] ** 2
        rows = (len(m), draws)
        sigma2 = (n - 1) * v / rng.chisquare(n - 1, rows)
        mu = m + np.sqrt(sigma2 / n) * rng.standard_normal(rows)
        total = n * m + np.zeros(rows)
        squares = (n - 1) * v + n * m * m + np.zeros(rows)
        decided = np.zeros(rows, dtype=bool)
        for look, bound in bounds.items():
            future = mu + np.sqrt(sigma2) * rng.standard_normal(rows)
            total, squares = total + future, squares + future * future
            at = total / look
            half = bound * np.sqrt(np.maximum(squares - total * total / look, 0) / (look - 1))
            half /= math.sqrt(look)
            equal = (at - half >= low_edge) & (at + half <= high_edge)
            differ = ((at > high_edge) | (at < low_edge)) & (np.abs(at) > half)
            decided |= equal | differ
        out[start : start + chunk] = decided.mean(axis=1)
    return float(out[0]) if scalar else out


def sweep_design(sweep_dir: Path) -> Design | None:
    """The design an adaptive sweep recorded in its rounds.json; None for fixed rounds."""
    record = read_rounds(sweep_dir)
    if not record or record.get("rule") != "adaptive":
        return None
    return Design(
        int(record["max_rounds"]),
        str(record.get("spending", DEFAULT_SPENDING)),
        int(record.get("min_rounds", FIRST_LOOK)),
    )
