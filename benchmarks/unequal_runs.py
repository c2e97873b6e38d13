"""Two sweeps compared (`python -m linkbench.report A B`) when they ran different numbers of
runs, by simulation through the report's own comparison (`across_sweeps`, Holm over the
configurations), for docs/statistics.md.

Each pair of sweeps has four configurations (CV 5 %, lognormal); sweep A runs ``runs_a`` runs
of each, sweep B ``runs_b``. For each cell it prints the share of A/A pairs that named a
faster or slower anywhere (with its standard error), with equal run-to-run spreads and with
sweep A's spread twice B's (a noisier host), and the power to decide a real 10 % difference
in every configuration (equal spreads).

    python benchmarks/unequal_runs.py [--pairs 4000]
"""

from __future__ import annotations

import argparse
import random
from concurrent.futures import ProcessPoolExecutor

from linkbench.analysis.compare import WINNERS, across_sweeps
from linkbench.analysis.simulate import with_se
from linkbench.analysis.sweep import group

CV = 0.05
CELLS = [(3, 8), (2, 8), (3, 20), (5, 8), (3, 3), (8, 8)]


def _sweep(rng: random.Random, runs: int, cv: float, effect: float = 1.0) -> list[dict]:
    return [
        {
            "job": f"batch={8 << b},seed={s}",
            "status": "completed",
            "settings": {"batch": 8 << b, "seed": s},
            "metrics": {"samples_per_sec": 1000 * effect * rng.lognormvariate(0, cv)},
        }
        for b in range(4)
        for s in range(runs)
    ]


def _cell(args: tuple[int, int, float, float, int]) -> tuple[list[bool], list[float]]:
    """For each pair of one cell: whether it named a winner, the share of its
    configurations decided."""
    runs_a, runs_b, spread_a, effect, pairs = args
    rng = random.Random(f"{args}")
    named, decided = [], []
    for _ in range(pairs):
        a = _sweep(rng, runs_a, CV * spread_a)
        b = _sweep(rng, runs_b, CV, effect)
        rows, _, _ = across_sweeps(group(a, ["batch", "seed"]), group(b, ["batch", "seed"]))
        winners = [r.verdict in WINNERS for r in rows]
        named.append(any(winners))
        decided.append(sum(winners) / len(winners))
    return named, decided


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=4000)
    pairs = parser.parse_args().pairs
    jobs = [(a, b, s, 1.0, pairs) for a, b in CELLS for s in (1.0, 2.0)]
    jobs += [(a, b, 1.0, 1.10, pairs // 4) for a, b in CELLS]
    with ProcessPoolExecutor() as pool:
        found = dict(zip(jobs, pool.map(_cell, jobs), strict=True))
    print(f"{pairs} A/A pairs a cell (power: {pairs // 4}), 4 configurations, CV {CV:.0%}, Holm")
    print("| runs A vs B | A/A, equal spreads | A/A, A's spread 2x | power at 10 % |")
    print("|---|---:|---:|---:|")
    for a, b in CELLS:
        equal = found[(a, b, 1.0, 1.0, pairs)][0]
        noisy = found[(a, b, 2.0, 1.0, pairs)][0]
        power = found[(a, b, 1.0, 1.10, pairs // 4)][1]
        print(f"| {a} vs {b} | {with_se(equal)} | {with_se(noisy)} | {with_se(power)} |")


if __name__ == "__main__":
    main()
