"""Comparisons of a sweep's configurations: along an axis, across device counts, across sweeps.

Along an axis (``interconnect`` by default, any swept key on request), every configuration is
compared with the one that differs from it only in the axis's baseline value. Across device
counts, throughput at N devices against one device gives the scaling efficiency. Two sweeps
are compared configuration by configuration. Each comparison is a ratio with its 95 %
interval from runs and a verdict (:mod:`linkbench.analysis.stats`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from linkbench.analysis.outliers import FALSE_FLAGS, per_configuration
from linkbench.analysis.sequential import (
    FIRST_FUTILITY_LOOK,
    FUTILE_BELOW,
    Design,
    chance_to_decide,
)
from linkbench.analysis.stats import (
    CONFIDENCE,
    DEFAULT_MARGIN,
    Interval,
    IntervalOptions,
    difference_interval,
    ratio_interval,
    verdict,
)
from linkbench.analysis.sweep import REPEAT_KEYS, Configuration, group, swept_keys
from linkbench.metrics import lower_is_better
from linkbench.result import JobResult

ACCURACY_MARGIN = 0.005  # held-out accuracy "equal" within ±0.5 points
DEFAULT_AXIS = "interconnect"
# How the verdicts of one sweep hold together (see sweep_comparisons); the first is the default.
FAMILIES = ("holm", "bonferroni", "none")
WINNERS = ("faster", "slower")
# The value an axis is compared against unless the user names one: the slower link, and
# DDP's communication without a hook.
DEFAULT_BASELINES = {"interconnect": "pcie", "strategy/comm_hook": "none", "comm_hook": "none"}
T = TypeVar("T")


@dataclass(frozen=True)
class Comparison:
    """An arm against its baseline on one metric, at equal other settings."""

    arm: Configuration
    base: Configuration
    axis: str
    metric: str
    unit: str
    ratio: Interval
    verdict: str
    margin: float
    step_time: Interval | None
    """The arm's step time over the baseline's."""
    step_time_diff_ms: Interval | None
    """The arm's step time minus the baseline's, in milliseconds."""
    outliers: tuple[tuple[str, float], ...] = ()
    """Outlier runs of either side on the headline metric: (job, its value over its
    configuration's median). A diagnostic: the verdict keeps them."""
    accuracy: Interval | None = None
    """The arm's held-out accuracy minus the baseline's (fractions; with eval on real data)."""
    design: Design | None = None
    """An adaptive sweep's design (its intervals are repeated ones)."""
    confidence: float = CONFIDENCE

    @property
    def lost(self) -> list[str]:
        """Jobs of either side that did not complete: the runs this comparison lacks."""
        return self.arm.lost() + self.base.lost()

    @property
    def pairs(self) -> int:
        """Rounds paired in the interval (both sides' runs of the same round; a round whose
        job failed on one side pairs nothing), 0 for an unpaired one."""
        return self.ratio.pairs

    def chance_to_decide(self) -> float | None:
        """Under an adaptive sweep's design, the chance that its last round decides this
        comparison at the spread seen so far (:func:`sequential.chance_to_decide`)."""
        r = self.ratio
        if self.design is None or r.method != "sequential" or not r.sd:
            return None
        mean = math.log(r.estimate)
        chance = chance_to_decide(mean, r.sd, self.pairs, self.design, self.margin, self.confidence)
        return float(chance)

    @property
    def futile(self) -> bool:
        """Undecided, with rounds left, and beyond deciding in them: an adaptive sweep
        stops it."""
        if self.design is None or not FIRST_FUTILITY_LOOK <= self.pairs < self.design.max_rounds:
            return False
        chance = self.chance_to_decide()
        return self.verdict == "inconclusive" and chance is not None and chance < FUTILE_BELOW

    def equal_margin_needed(self) -> float | None:
        """The margin within which the last look's interval could call it equal, at the
        spread seen so far (None without a design)."""
        if self.design is None or not self.ratio.sd:
            return None
        last = self.design.max_rounds
        return math.expm1(
            self.design.t_bound(last, self.confidence) * self.ratio.sd / math.sqrt(last)
        )

    @property
    def accuracy_verdict(self) -> str | None:
        """ "equal" within ±ACCURACY_MARGIN, "lower" or "higher" when the interval excludes
        0, "inconclusive" otherwise; None without held-out accuracy on both sides."""
        a = self.accuracy
        if a is None:
            return None
        if not a.has_interval:
            return "inconclusive"
        if a.low >= -ACCURACY_MARGIN and a.high <= ACCURACY_MARGIN:
            return "equal"
        if a.high < 0 or a.low > 0:
            return "lower" if a.high < 0 else "higher"
        return "inconclusive"

    @property
    def baseline(self) -> Any:
        return self.base.values_by_key[self.axis]

    @property
    def arm_value(self) -> Any:
        return self.arm.values_by_key[self.axis]

    @property
    def where(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.arm.settings if k != self.axis)

    @property
    def name(self) -> str:
        """How rounds.json names it: ``axis=arm vs baseline at other=settings``."""
        return f"{self.axis}={self.arm_value} vs {self.baseline}" + (
            f" at {self.where}" if self.where else ""
        )


def _pairs(arm: Configuration, base: Configuration, key: str) -> list[tuple[float, float]]:
    """(arm, baseline) values of the rounds (and seeds) both ran, when they ran in
    interleaved rounds or over the same seeds."""
    a, b = arm.paired(key), base.paired(key)
    return [(a[r], b[r]) for r in sorted(set(a) & set(b), key=str)]


def compare_configurations(
    arm: Configuration,
    base: Configuration,
    axis: str,
    margin: float = DEFAULT_MARGIN,
    design: Design | None = None,
    confidence: float = CONFIDENCE,
    false_flags: float = FALSE_FLAGS,
) -> Comparison | None:
    """``arm`` against ``base`` on the headline metric and the step time; None without runs.
    An adaptive sweep's ``design`` makes the paired intervals its repeated ones; each side's
    outlier runs are named at ``false_flags`` (:func:`linkbench.analysis.outliers.flagged`)."""
    metric, unit = arm.headline()
    values, base_values = arm.values(metric), base.values(metric)
    if not values or not base_values or min(values + base_values) <= 0:
        return None
    options = IntervalOptions(confidence=confidence, design=design)
    ratio = ratio_interval(values, base_values, _pairs(arm, base, metric), **options)
    step, base_step = arm.values("step_time_ms"), base.values("step_time_ms")
    step_pairs = _pairs(arm, base, "step_time_ms")
    step_ratio = step_diff = None
    if step and base_step:
        step_ratio = ratio_interval(step, base_step, step_pairs, **options)
        step_diff = difference_interval(step, base_step, step_pairs, **options)
    higher = not lower_is_better(metric)
    decided = verdict(ratio, margin, higher_is_better=higher)
    found = Comparison(
        arm, base, axis, metric, unit, ratio, decided, margin, step_ratio, step_diff,
        design=design, confidence=confidence,
    )  # fmt: skip
    if (accuracy := accuracy_interval(arm, base, options)) is not None:
        found = replace(found, accuracy=accuracy)
    outliers = tuple(
        (str(r.job), r.metrics[metric] / statistics.median(c.values(metric)))
        for c in (arm, base)
        for r in c.outliers(metric, false_flags)
        if r.job
    )
    return replace(found, outliers=outliers) if outliers else found


def accuracy_interval(
    arm: Configuration, base: Configuration, options: IntervalOptions
) -> Interval | None:
    """The arm's held-out accuracy minus the baseline's, with its interval; None without
    held-out accuracy on both sides (or on data whose labels cannot be learnt, whose
    accuracy is chance: :meth:`Configuration.learnable`)."""
    accuracy, base_accuracy = arm.values("eval_accuracy"), base.values("eval_accuracy")
    if not accuracy or not base_accuracy or not (arm.learnable() and base.learnable()):
        return None
    pairs = _pairs(arm, base, "eval_accuracy")
    return difference_interval(accuracy, base_accuracy, pairs, **options)


def accuracy_family(comparisons: list[Comparison], family: str) -> tuple[list[Comparison], float]:
    """The comparisons with their accuracy verdicts a family of their own (Holm by default):
    an A/A sweep says "accuracy lower/higher" anywhere in at most 5 % of sweeps, whatever
    the speed verdicts decided (before, accuracy borrowed the speed family's last level).
    Returns them and the accuracy intervals' level."""
    judged = [c for c in comparisons if c.accuracy is not None]
    if family == "none" or len(judged) < 2:
        return comparisons, CONFIDENCE

    def judge(level: float) -> list[Comparison]:
        options = IntervalOptions(confidence=level, design=judged[0].design)
        return [replace(c, accuracy=accuracy_interval(c.arm, c.base, options)) for c in judged]

    found, level, _ = holm(
        judge, len(judged), lambda c: c.accuracy_verdict in ("lower", "higher"),
        bonferroni=family == "bonferroni",
    )  # fmt: skip
    by_id = {id(c): f for c, f in zip(judged, found, strict=True)}
    return [by_id.get(id(c), c) for c in comparisons], level


def default_baseline(configs: list[Configuration], axis: str) -> Any:
    """The baseline value of an axis: its :data:`DEFAULT_BASELINES` value where the sweep has
    it (pcie for interconnect, none for a communication hook), else the first (smallest)."""
    values = [c.values_by_key.get(axis) for c in configs]
    wanted = DEFAULT_BASELINES.get(axis)
    if wanted in [str(v) for v in values]:
        return wanted
    return values[0] if values else None


def along_axis(
    configs: list[Configuration],
    axis: str,
    baseline: Any,
    margin: float = DEFAULT_MARGIN,
    design: Design | None = None,
    confidence: float = CONFIDENCE,
    false_flags: float = FALSE_FLAGS,
) -> list[Comparison]:
    """Every configuration against its baseline along ``axis`` at equal other settings."""
    comparisons = []
    for config in configs:
        settings = config.values_by_key
        if axis not in settings or str(settings[axis]) == str(baseline):
            continue
        wanted = {k: (baseline if k == axis else v) for k, v in settings.items()}
        base = next(
            (c for c in configs if {k: str(v) for k, v in c.settings} == _text(wanted)), None
        )
        if base is not None and (
            found := compare_configurations(
                config, base, axis, margin, design, confidence, false_flags
            )
        ):
            comparisons.append(found)
    return comparisons


def unjudged(configs: list[Configuration], comparisons: list[Comparison], axis: str | None,
             baseline: Any) -> list[tuple[Configuration, Configuration]]:  # fmt: skip
    """(arm, baseline) along ``axis`` with no comparison because a side has no run to count
    (every job of it failed or was stopped, or its transport was not verified)."""
    if axis is None:
        return []
    judged = {(id(c.arm), id(c.base)) for c in comparisons}
    out = []
    for config in configs:
        settings = config.values_by_key
        if axis not in settings or str(settings[axis]) == str(baseline):
            continue
        wanted = _text({k: (baseline if k == axis else v) for k, v in settings.items()})
        base = next((c for c in configs if _text(c.values_by_key) == wanted), None)
        if base is not None and (id(config), id(base)) not in judged:
            out.append((config, base))
    return out


@dataclass(frozen=True)
class SweepComparisons:
    """A sweep's configurations and its comparisons along one axis (none without an axis)."""

    keys: list[str]
    """The swept keys."""
    configs: list[Configuration]
    comparisons: list[Comparison]
    confidence: float = CONFIDENCE
    """Of each interval: 95 %, 1 - 5 %/m for a Bonferroni family of m comparisons, or
    1 - 5 %/(m - k) where Holm's step-down decided k of them first."""
    family: str = "none"
    decided_first: int = 0
    """Holm: the comparisons decided before the final level (k above)."""
    unjudged: list[tuple[Configuration, Configuration]] = field(default_factory=list)
    """(arm, baseline) pairs with no comparison: a side has no run to count."""
    axis_note: str | None = None
    """How the axis was chosen where the user named none and it is not ``interconnect``, or
    why there is none."""


def sweep_comparisons(
    results: list[JobResult],
    axis: str | None = None,
    baseline: Any = None,
    margin: float = DEFAULT_MARGIN,
    design: Design | None = None,
    family: str = FAMILIES[0],
) -> SweepComparisons:
    """The sweep's configurations, and every comparison along ``axis`` (default
    ``interconnect`` when it is swept) against ``baseline`` (default: pcie for the
    interconnect, else the axis's first value): what the summary and adaptive rounds read.

    ``family``, how the m verdicts hold together (in an A/A sweep a false faster or slower
    anywhere in the sweep at most 5 %, except with ``none``):

    - ``holm`` (default): Holm's step-down. Every interval at 1 - 5 %/m; once k comparisons
      are decided faster or slower, the others at 1 - 5 %/(m - k), until no more are. It
      decides what Bonferroni does and more; it stays valid under the sequential design's
      repeated looks when each comparison's boundaries are recomputed at its new level with
      the same spending function (W. Maurer and F. Bretz, "Multiple testing in group
      sequential trials using graphical approaches", Stat. Biopharm. Res. 5(4), 2013).
    - ``bonferroni``: every interval at 1 - 5 %/m; simultaneous intervals, fewer winners.
    - ``none``: each comparison its own 95 %; an A/A sweep of m comparisons names a winner
      somewhere in up to 1 - 0.95^m of sweeps."""
    if family not in FAMILIES:
        raise ValueError(f"family={family!r}: choose one of {', '.join(FAMILIES)}")
    keys = swept_keys(results)
    configs = group(results, keys)
    note = None
    if axis is None:
        axis = default_axis(keys)
        varied = [k for k in keys if k not in REPEAT_KEYS]
        if axis is None and len(varied) > 1:
            note = (
                f"No comparisons: this sweep varies {', '.join(varied)} and none of them is "
                "the default axis; choose one with hydra.callbacks.sweep_summary.axis=KEY (or "
                "python -m linkbench.report SWEEP --axis KEY)."
            )
        elif axis is not None and axis != DEFAULT_AXIS:
            note = (
                f"Compared along {axis}, the one key this sweep varies (name another with "
                "hydra.callbacks.sweep_summary.axis)."
            )
    if axis is None or axis not in keys:
        return SweepComparisons(keys, configs, [], axis_note=note)
    if baseline is None:
        baseline = default_baseline(configs, axis)
    # Outliers are named over every configuration with runs: each at the Šidák share.
    flags = per_configuration(sum(bool(c.runs()) for c in configs))
    comparisons = along_axis(configs, axis, baseline, margin, design, false_flags=flags)
    lost = unjudged(configs, comparisons, axis, baseline)
    m = len(comparisons)
    if family == "none" or m < 2:
        return SweepComparisons(keys, configs, comparisons, unjudged=lost, axis_note=note)
    comparisons, confidence, decided = holm(
        lambda level: along_axis(configs, axis, baseline, margin, design, level, flags),
        m,
        lambda c: c.verdict in WINNERS,
        bonferroni=family == "bonferroni",
    )
    comparisons, _ = accuracy_family(comparisons, family)
    return SweepComparisons(keys, configs, comparisons, confidence, family, decided, lost, note)


def holm(
    judge: Callable[[float], list[T]],
    m: int,
    is_winner: Callable[[T], bool],
    bonferroni: bool = False,
) -> tuple[list[T], float, int]:
    """Holm's step-down over ``m`` verdicts, ``judge(confidence)`` giving them all at one
    level: every interval at 1 - 5 %/m; once k of them are decided (``is_winner``), the rest
    at 1 - 5 %/(m - k), until no more are (``bonferroni``: the first level only). Returns
    the verdicts, the final level and k."""
    decided = 0
    while True:
        confidence = 1 - (1 - CONFIDENCE) / max(1, m - decided)
        found = judge(confidence)
        winners = sum(map(is_winner, found))
        if bonferroni or winners <= decided or winners == m:
            return found, confidence, decided
        decided = winners


def default_axis(keys: list[str]) -> str | None:
    """The axis a sweep is compared along when none is named: ``interconnect`` when it is
    swept, else the one key the sweep varies (None when it varies several, or none)."""
    if DEFAULT_AXIS in keys:
        return DEFAULT_AXIS
    varied = [k for k in keys if k not in REPEAT_KEYS]
    return varied[0] if len(varied) == 1 else None


def _text(settings: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in settings.items()}


@dataclass(frozen=True)
class AcrossSweeps:
    """One configuration of sweep A against the same in sweep B (None where B lacks it)."""

    a: Configuration
    b: Configuration | None
    ratio: Interval | None
    """B over A on the headline metric (Welch: the rounds of two sweeps do not pair)."""
    verdict: str | None


def across_sweeps(
    configs_a: list[Configuration],
    configs_b: list[Configuration],
    margin: float = DEFAULT_MARGIN,
    family: str = FAMILIES[0],
) -> tuple[list[AcrossSweeps], float, int]:
    """Every configuration both sweeps ran, B against A, its verdicts holding together as a
    sweep's do (``family``: an A/A pair of sweeps names a faster or slower anywhere in at
    most 5 % of pairs, except with ``none``). Returns the rows, the level of their intervals
    and how many Holm decided first."""
    by_settings = {c.settings: c for c in configs_b}
    both = [
        (a, b)
        for a in configs_a
        if (b := by_settings.get(a.settings)) is not None
        and a.values(a.headline()[0])
        and b.values(a.headline()[0])
    ]

    def judge(confidence: float) -> list[AcrossSweeps]:
        rows = []
        for a, b in both:
            key = a.headline()[0]
            ratio = ratio_interval(b.values(key), a.values(key), confidence=confidence)
            rows.append(AcrossSweeps(a, b, ratio, verdict(ratio, margin, not lower_is_better(key))))
        return rows

    m = len(both)
    if family == "none" or m < 2:
        found, confidence, decided = judge(CONFIDENCE), CONFIDENCE, 0
    else:
        found, confidence, decided = holm(
            judge, m, lambda r: r.verdict in WINNERS, bonferroni=family == "bonferroni"
        )
    judged = {id(r.a) for r in found}
    missing = [AcrossSweeps(a, by_settings.get(a.settings), None, None) for a in configs_a
               if id(a) not in judged]  # fmt: skip
    return found + missing, confidence, decided


@dataclass(frozen=True)
class ScalingRow:
    """Throughput at N devices against one device, at equal other settings."""

    config: Configuration
    devices: int
    efficiency: Interval | None
    """throughput(N) / (N x throughput(1)), with its interval; None without a 1-device run."""


def scaling_rows(configs: list[Configuration], key: str = "devices") -> list[ScalingRow]:
    """The scaling table's rows, when ``devices`` is swept."""
    rows = []
    for config in configs:
        settings = config.values_by_key
        if not isinstance(settings.get(key), int):
            continue
        one = {k: (1 if k == key else v) for k, v in settings.items()}
        single = next((c for c in configs if _text(c.values_by_key) == _text(one)), None)
        efficiency = None
        n = settings[key]
        if single is not None:
            found = compare_configurations(config, single, key)
            if found is not None:
                r = found.ratio
                efficiency = Interval(
                    r.estimate / n, r.low / n, r.high / n, r.runs, r.method, r.sd, r.pairs
                )
        rows.append(ScalingRow(config, n, efficiency))
    return rows
