"""A sweep of m comparisons makes m verdicts. By default (family=holm) they hold together:
an A/A sweep names a winner anywhere in at most 5 % of sweeps, as Bonferroni's does, while
Holm decides every real difference Bonferroni decides and more; family=none gives each its
own 5 %. The summary says which holds."""

from __future__ import annotations

import math
import random

import pytest

from linkbench.analysis.compare import WINNERS, sweep_comparisons
from linkbench.analysis.report import write_summary
from linkbench.files import RESULT_FILE, write_json

BATCHES = (8, 16, 32, 64, 128, 256)  # six comparisons of nvlink against pcie
ROUNDS = 4
SWEEPS = 400
AT_MOST_5 = 0.05 + 3 * math.sqrt(0.05 * 0.95 / SWEEPS)


def _results(rng: random.Random, effects: tuple[float, ...] = (1.0,) * len(BATCHES)) -> list:
    """nvlink ``effects[i]`` times pcie's throughput at batch i, CV 5 %."""
    results = []
    for batch, effect in zip(BATCHES, effects, strict=True):
        for arm in ("nvlink", "pcie"):
            for r in range(ROUNDS):
                value = 1000 * rng.lognormvariate(0, 0.05) * (effect if arm == "nvlink" else 1)
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


def _winners(results: list[dict], family: str) -> set[str]:
    found = sweep_comparisons(results, family=family)
    assert len(found.comparisons) == len(BATCHES)
    return {str(c.where) for c in found.comparisons if c.verdict in WINNERS}


def test_holm_and_bonferroni_keep_the_whole_a_a_sweep_at_5_percent():
    rng = random.Random(21)
    sweeps = [_results(rng) for _ in range(SWEEPS)]
    rates = {
        family: sum(bool(_winners(s, family)) for s in sweeps) / SWEEPS
        for family in ("none", "bonferroni", "holm")
    }
    assert rates["none"] > 0.15  # six comparisons at 5 % each: about 26 %
    assert rates["bonferroni"] <= AT_MOST_5 and rates["holm"] <= AT_MOST_5


def test_holm_decides_what_bonferroni_does_and_more():
    """Three real differences of 12 % among six comparisons."""
    rng = random.Random(5)
    effects = (1.12, 1.12, 1.12, 1.0, 1.0, 1.0)
    holm = bonferroni = 0
    for _ in range(SWEEPS // 2):
        results = _results(rng, effects)
        by_holm, by_bonferroni = _winners(results, "holm"), _winners(results, "bonferroni")
        assert by_bonferroni <= by_holm
        holm, bonferroni = holm + len(by_holm), bonferroni + len(by_bonferroni)
    assert holm > 1.05 * bonferroni, (holm, bonferroni)


def test_the_summary_says_how_its_verdicts_hold(tmp_path):
    for result in _results(random.Random(1)):
        (tmp_path / result["job"]).mkdir()
        write_json(tmp_path / result["job"] / RESULT_FILE, result)
    holm = write_summary(tmp_path, plots=False)
    assert holm is not None and "Holm over the 6 comparisons (family=holm, the default)" in holm
    alone = write_summary(tmp_path, plots=False, family="none")
    assert alone is not None and "Each comparison's 5 % error stands alone" in alone
    together = write_summary(tmp_path, plots=False, family="bonferroni")
    assert together is not None and "each interval at 1 - 5 %/6 = 99.17 %" in together


def _one_sweep(rng: random.Random, configurations: int = 4, runs: int = 3) -> list:
    """A sweep of ``configurations`` batches, ``runs`` seeds each, CV 5 %."""
    return [
        {
            "job": f"batch={8 << b},seed={s}",
            "status": "completed",
            "settings": {"batch": 8 << b, "seed": s},
            "metrics": {"samples_per_sec": (v := 1000 * rng.lognormvariate(0, 0.05)),
                        "step_time_ms": 1e5 / v},
        }
        for b in range(configurations)
        for s in range(runs)
    ]  # fmt: skip


def test_two_a_a_sweeps_compared_name_a_winner_in_at_most_5_percent_of_pairs():
    """`report A B`: before, one 95 % verdict per configuration and no family, so an A/A pair
    of sweeps with 4 configurations named a faster or slower in 13.8 ± 1.4 % of pairs."""
    from linkbench.analysis.compare import across_sweeps
    from linkbench.analysis.sweep import group

    rng = random.Random(5)
    pairs = 1000
    named = {"holm": 0, "none": 0}
    for _ in range(pairs):
        a, b = _one_sweep(rng), _one_sweep(rng)
        configs_a, configs_b = group(a, ["batch", "seed"]), group(b, ["batch", "seed"])
        for family in named:
            rows, _, _ = across_sweeps(configs_a, configs_b, family=family)
            assert len(rows) == 4
            named[family] += any(r.verdict in WINNERS for r in rows)
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / pairs)
    assert named["holm"] / pairs <= bound, named
    assert named["none"] / pairs > bound, "each its own 5 %: the family is what holds it"


@pytest.mark.parametrize(("runs_a", "runs_b"), [(2, 8), (3, 20), (8, 3)])
def test_a_a_sweeps_of_unequal_runs_name_a_winner_in_at_most_5_percent_of_pairs(runs_a, runs_b):
    """An adaptive sweep against a fixed one, a failed run, repeats=3 against repeats=20:
    before, Welch-Satterthwaite's degrees of freedom, estimated from few runs, named a
    winner in 14.9 % (2 vs 8) and 12.7 % (3 vs 20) of A/A pairs (stats.welch_df)."""
    from linkbench.analysis.compare import across_sweeps
    from linkbench.analysis.sweep import group

    rng = random.Random(runs_a * 100 + runs_b)
    pairs = 800
    named = 0
    for _ in range(pairs):
        a, b = _one_sweep(rng, runs=runs_a), _one_sweep(rng, runs=runs_b)
        rows, _, _ = across_sweeps(group(a, ["batch", "seed"]), group(b, ["batch", "seed"]))
        named += any(r.verdict in WINNERS for r in rows)
    assert named / pairs <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / pairs), named


def test_welch_degrees_of_freedom_are_capped_at_what_equal_spreads_give():
    from linkbench.analysis.stats import welch_df

    assert welch_df(1.0, 1.0, 5, 5) == pytest.approx(8)  # equal runs, equal spreads: 2(n-1)
    assert welch_df(0.01, 1.0, 3, 8) == pytest.approx(
        (1 / 3 + 1 / 8) ** 2 / ((1 / 3) ** 2 / 2 + (1 / 8) ** 2 / 7)
    )  # the few runs varied little: Satterthwaite's would be near 7
    assert welch_df(1.0, 0.01, 3, 8) < 2.1  # the few runs carry the spread: about 2
