"""Does accuracy hold as the batch grows? A non-inferiority statement with its error stated.

For each rule (every swept setting but the batch), every larger global batch is compared
with the smallest: the held-out accuracy difference with its interval (paired by round or
seed where both ran them, else Welch's). A batch **held** when the one-sided lower bound of
the difference lies above -``tolerance`` (the non-inferiority margin, as the learning-rate
scaling literature states its results: accuracy within a point of the small-batch baseline),
and accuracy "held up to global batch X" when X and every batch below it held. A batch whose
whole interval lies below -``tolerance`` is **lower**; one neither held nor lower is **not
shown** either way (more runs narrow it). Every claim of the table is one family: each
larger batch of each rule is one test (for a batch at most one of held and lower can be
wrong), under Holm's step-down (every bound at 5 % over the tests, then, with k claims made,
the rest at 5 % over the tests left), so a sweep's table says anything wrong (a batch held
that did not, or lower that was not) in at most 5 % of sweeps, whatever the truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from linkbench.analysis.compare import holm
from linkbench.analysis.stats import Interval, difference_interval
from linkbench.analysis.sweep import Configuration

KEY = "eval_accuracy"


@dataclass(frozen=True)
class BatchStep:
    """One larger batch of a rule against the rule's smallest."""

    config: Configuration
    global_batch: int
    difference: Interval | None
    """Its accuracy minus the smallest batch's (fractions), at the table's two-sided level
    whose ends are the one-sided bounds; None with too few runs."""
    verdict: str
    """held, lower or not shown."""


@dataclass(frozen=True)
class RuleConvergence:
    rule: str
    smallest: Configuration
    smallest_batch: int
    steps: list[BatchStep]
    confidence: float
    """One-sided level of each bound: Holm's last, 1 - 5 %/(tests - claims made before)."""

    @property
    def held_up_to(self) -> int:
        """The largest global batch that held with every smaller one (the smallest when
        none did)."""
        held = self.smallest_batch
        for step in self.steps:
            if step.verdict != "held":
                break
            held = step.global_batch
        return held


def _pairs(arm: Configuration, base: Configuration) -> list[tuple[float, float]]:
    a, b = arm.paired(KEY), base.paired(KEY)
    return [(a[r], b[r]) for r in sorted(set(a) & set(b), key=str)]


def rules(configs: list[Configuration], tolerance: float) -> list[RuleConvergence]:
    """Every rule's batches against its smallest, judged as the module says: every larger
    batch of every rule one test of one family, Holm's step-down over them."""
    by_rule: dict[str, list[tuple[int, Configuration]]] = {}
    for config in configs:
        if not config.values(KEY):
            continue
        rule = config.label(skip="batch") if "batch" in config.values_by_key else "all"
        by_rule.setdefault(rule, []).append((int(config.first("global_batch") or 0), config))
    found = [(r, sorted(p, key=lambda x: x[0])) for r, p in by_rule.items() if len(p) > 1]

    def judge(one_sided: float) -> list[tuple[str, BatchStep]]:
        two_sided = 1 - 2 * (1 - one_sided)  # each end is a one-sided bound
        return [
            (rule, _step(config, batch, points[0][1], two_sided, tolerance))
            for rule, points in found
            for batch, config in points[1:]
        ]

    tests = sum(len(points) - 1 for _, points in found)
    judged, level, _ = holm(judge, tests, lambda found: found[1].verdict in CLAIMS)
    return [
        RuleConvergence(
            rule, points[0][1], points[0][0], [s for r, s in judged if r == rule], level
        )
        for rule, points in found
    ]


CLAIMS = ("held", "lower")


def _step(
    config: Configuration, batch: int, base: Configuration, two_sided: float, tolerance: float
) -> BatchStep:
    """One larger batch against its rule's smallest, at one level."""
    arm, ref = config.values(KEY), base.values(KEY)
    diff = difference_interval(arm, ref, _pairs(config, base), confidence=two_sided)
    if not diff.has_interval:
        return BatchStep(config, batch, None, "not shown")
    if diff.low > -tolerance:
        verdict = "held"
    elif diff.high < -tolerance:
        verdict = "lower"
    else:
        verdict = "not shown"
    return BatchStep(config, batch, diff, verdict)
