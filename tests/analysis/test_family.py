"""A sweep of m comparisons makes m verdicts: family=bonferroni makes them hold together
(an A/A sweep names a winner anywhere in at most 5 % of sweeps); the default gives each its
own 5 %, and the summary says which."""

from __future__ import annotations

import random

from linkbench.analysis.compare import sweep_comparisons
from linkbench.analysis.report import write_summary
from linkbench.files import RESULT_FILE, write_json

BATCHES = (8, 16, 32, 64, 128, 256)  # six A/A comparisons of nvlink against pcie
ROUNDS = 4
SWEEPS = 400


def _results(rng: random.Random) -> list[dict]:
    results = []
    for batch in BATCHES:
        for arm in ("nvlink", "pcie"):
            for r in range(ROUNDS):
                value = 1000 * rng.lognormvariate(0, 0.05)
                results.append(
                    {
                        "job": f"batch={batch},interconnect={arm},round={r}",
                        "status": "completed",
                        "settings": {"batch": batch, "interconnect": arm, "round": r},
                        "round": r,
                        "metrics": {"samples_per_sec": value, "step_time_ms": 1e5 / value},
                    }
                )
    return results


def _any_winner(results: list[dict], family: str) -> bool:
    found = sweep_comparisons(results, family=family)
    assert len(found.comparisons) == len(BATCHES)
    return any(c.verdict in ("faster", "slower") for c in found.comparisons)


def test_bonferroni_keeps_the_whole_a_a_sweep_at_5_percent():
    rng = random.Random(21)
    sweeps = [_results(rng) for _ in range(SWEEPS)]
    alone = sum(_any_winner(s, "none") for s in sweeps) / SWEEPS
    together = sum(_any_winner(s, "bonferroni") for s in sweeps) / SWEEPS
    assert alone > 0.15  # six comparisons at 5 % each: about 26 %
    assert together <= 0.05 + 3 * (0.05 * 0.95 / SWEEPS) ** 0.5


def test_the_summary_says_how_its_verdicts_hold(tmp_path):
    for result in _results(random.Random(1)):
        (tmp_path / result["job"]).mkdir()
        write_json(tmp_path / result["job"] / RESULT_FILE, result)
    alone = write_summary(tmp_path, plots=False)
    assert alone is not None and "Each comparison's 5 % error stands alone" in alone
    together = write_summary(tmp_path, plots=False, family="bonferroni")
    assert together is not None and "each interval at 1 - 5 %/6 = 99.17 %" in together
