"""Does accuracy hold as the batch grows? A non-inferiority statement with its error stated.

For each rule (every swept setting but the batch), every larger global batch is compared
with the smallest: the held-out accuracy difference with its interval (paired by round or
seed where both ran them, else Welch's). A batch **held** when the one-sided lower bound of
the difference lies above -``tolerance`` (the non-inferiority margin, as the learning-rate
scaling literature states its results: accuracy within a point of the small-batch baseline),
and accuracy "held up to global batch X" when X and every batch below it held. The batches
of a rule are tested in increasing order at the full 5 %, stopping at the first that does
not hold (fixed-sequence testing: a rule claims a batch held that did not in at most 5 % of
sweeps), and the rules of a sweep share the 5 % (Bonferroni). A batch whose whole interval
lies below -``tolerance`` is **lower**; one neither held nor lower is **not shown** either
way (more runs narrow it). With the same true accuracy at every batch, a sweep says "lower"
anywhere in at most 5 % of sweeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from linkbench.analysis.stats import CONFIDENCE, Interval, difference_interval
from linkbench.analysis.sweep import Configuration

KEY = "eval_accuracy"


@dataclass(frozen=True)
class BatchStep:
    """One larger batch of a rule against the rule's smallest."""

    config: Configuration
    global_batch: int
    difference: Interval | None
    """Its accuracy minus the smallest batch's (fractions), at the rule's two-sided level
    whose lower end is the one-sided bound; None with too few runs."""
    verdict: str
    """held, lower, not shown, or not tested (a smaller batch did not hold)."""


@dataclass(frozen=True)
class RuleConvergence:
    rule: str
    smallest: Configuration
    smallest_batch: int
    steps: list[BatchStep]
    confidence: float
    """One-sided level of each bound (0.95 over the rules, Bonferroni)."""

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
    """Every rule's batches against its smallest, judged as the module says."""
    by_rule: dict[str, list[tuple[int, Configuration]]] = {}
    for config in configs:
        if not config.values(KEY):
            continue
        rule = config.label(skip="batch") if "batch" in config.values_by_key else "all"
        by_rule.setdefault(rule, []).append((int(config.first("global_batch") or 0), config))
    found = [(r, sorted(p, key=lambda x: x[0])) for r, p in by_rule.items() if len(p) > 1]
    one_sided = 1 - (1 - CONFIDENCE) / max(1, len(found))
    two_sided = 1 - 2 * (1 - one_sided)  # its lower end is the one-sided bound
    out = []
    for rule, points in found:
        (small, base), steps, going = points[0], [], True
        for batch, config in points[1:]:
            arm, ref = config.values(KEY), base.values(KEY)
            diff = difference_interval(arm, ref, _pairs(config, base), confidence=two_sided)
            if not diff.has_interval:
                verdict, going = "not shown", False
            elif diff.high < -tolerance:
                verdict, going = "lower", False
            elif going and diff.low > -tolerance:
                verdict = "held"
            else:
                verdict, going = ("not shown" if going else "not tested"), False
            steps.append(BatchStep(config, batch, diff if diff.has_interval else None, verdict))
        out.append(RuleConvergence(rule, base, small, steps, one_sided))
    return out
