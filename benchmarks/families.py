"""What each family of verdicts costs an adaptive sweep, by simulation, for docs/statistics.md.

Simulated sweeps of three arms against one baseline (CV 5 %, lognormal), run round by round
under the sweeper's own rule (`linkbench.launcher.sweeper.after_round`: min_rounds 3,
max_rounds 8, O'Brien-Fleming spending, futility from round 4) with the summary's own
comparisons (`sweep_comparisons`). For each family (`holm`, the default; `bonferroni`;
`none`) and each truth (no arm differs; one arm 10 % faster; all three 10 % faster) it
prints the share of sweeps that named a false winner anywhere, the power (the share of real
differences decided faster), and the mean rounds the sweep ran, each with its standard error.

    python benchmarks/families.py [--sweeps 2000] [--max-rounds 8]
"""

from __future__ import annotations

import argparse
import random
from concurrent.futures import ProcessPoolExecutor

from linkbench.analysis.compare import FAMILIES, sweep_comparisons
from linkbench.analysis.sequential import Design
from linkbench.analysis.simulate import with_se
from linkbench.launcher.sweeper import after_round
from linkbench.sweep_defaults import DEFAULT_MAX_ROUNDS, DEFAULT_MIN_ROUNDS

CV = 0.05
TRUTHS = {
    "A/A (no arm differs)": (1.0, 1.0, 1.0),
    "one arm 10 % faster": (1.10, 1.0, 1.0),
    "three arms 10 % faster": (1.10, 1.10, 1.10),
}


def _run(arm: int, r: int, effect: float, rng: random.Random) -> dict:
    value = 1000 * effect * rng.lognormvariate(0, CV)
    return {
        "job": f"interconnect=arm{arm},round={r}",
        "status": "completed",
        "settings": {"interconnect": f"arm{arm}", "round": r},
        "round": r,
        "metrics": {"samples_per_sec": value, "step_time_ms": 1e5 / value},
    }


def sweep(
    family: str, effects: tuple[float, ...], seed: int, max_rounds: int
) -> tuple[bool, int, int]:
    """(a false winner named, real differences decided faster, rounds run) of one sweep."""
    rng, design = random.Random(seed), Design(max_rounds, min_rounds=DEFAULT_MIN_ROUNDS)
    arms = {0: 1.0, **{i + 1: e for i, e in enumerate(effects)}}  # arm0 is the baseline
    results: list[dict] = []
    needed = set(arms)
    r = 0
    while True:
        results += [_run(a, r, arms[a], rng) for a in sorted(needed)]
        r += 1
        found = sweep_comparisons(results, baseline="arm0", design=design, family=family)
        stop, undecided, _ = after_round(found.comparisons, r, design)
        if stop is not None:
            break
        needed = {0, *(int(str(c.arm_value)[3:]) for c in undecided)}
    verdicts = {int(str(c.arm_value)[3:]): c.verdict for c in found.comparisons}
    false = any(v in ("faster", "slower") for a, v in verdicts.items() if arms[a] == 1.0)
    true = sum(v == "faster" for a, v in verdicts.items() if arms[a] > 1.0)
    return false, true, r


def cell(args: tuple[str, tuple[float, ...], int, int, int]) -> tuple[str, str, str]:
    """(false winner anywhere, power, mean rounds) of one cell, each with its SE; seeds from
    ``first`` on, so cells of one truth see the same sweeps' noise."""
    family, effects, sweeps, max_rounds, first = args
    found = [sweep(family, effects, seed, max_rounds) for seed in range(first, first + sweeps)]
    real = sum(e > 1 for e in effects)
    # Power: each sweep's share of its real differences decided faster (they share noise).
    decided = [t / real for _, t, _ in found] if real else []
    return (
        with_se([f for f, _, _ in found]),
        with_se(decided) if real else "",
        with_se([r for _, _, r in found], percent=False),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=2000)
    parser.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS)
    parser.add_argument("--first-seed", type=int, default=0)
    args = parser.parse_args()
    cells = [
        (f, e, args.sweeps, args.max_rounds, args.first_seed)
        for e in TRUTHS.values()
        for f in FAMILIES
    ]
    with ProcessPoolExecutor() as pool:
        found = dict(zip([(f, e) for f, e, *_ in cells], pool.map(cell, cells), strict=True))
    print(
        f"{args.sweeps} simulated sweeps per cell: 3 arms against one baseline, CV {CV:.0%}, "
        f"max_rounds={args.max_rounds}"
    )
    print()
    print("| truth | family | a false winner anywhere | power | mean rounds |")
    print("|---|---|---:|---:|---:|")
    for name, effects in TRUTHS.items():
        for family in FAMILIES:
            false, power, rounds = found[(family, effects)]
            print(f"| {name} | {family} | {false} | {power} | {rounds} |")


if __name__ == "__main__":
    main()
