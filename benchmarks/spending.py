"""What each spending function and ``min_rounds`` costs an adaptive sweep, by simulation, for
docs/statistics.md: the rounds to a decision at the same error, and the power.

Simulated comparisons (``linkbench.analysis.simulate``: the sweeper's rule, vectorised) of
one arm against its baseline, lognormal run-to-run noise, max_rounds 8, futility from round
4. For each design (spending function, and the first look: the sweeper's ``min_rounds``;
looks before it spend nothing) and each truth it prints the share of sweeps that named a
false winner (A/A at CV 5 %), the share called equal (A/A at CV 1 %), the power (a real
difference decided faster), and the mean rounds run, each with its standard error.

    python benchmarks/spending.py [--sweeps 40000]
"""

from __future__ import annotations

import argparse

import numpy as np

from linkbench.analysis.sequential import Design
from linkbench.analysis.simulate import simulate, with_se

MAX_ROUNDS = 8
SPENDINGS = (
    "obrien_fleming",
    "hwang_shih_decani(-4)",
    "hwang_shih_decani(-2)",
    "hwang_shih_decani(0)",
    "pocock",
)
FIRST_LOOKS = (2, 3, 4)
POWER = 0.84  # the default design's (O'Brien-Fleming, max_rounds 8)
TRUTHS = {  # (true ratio, CV, the verdict counted: a false winner, equal, or the power)
    "A/A, CV 5 %: winner": (1.0, 0.05, ("faster", "slower")),
    "A/A, CV 1 %: `equal`": (1.0, 0.01, ("equal",)),
    "10 %, CV 5 %: power": (1.10, 0.05, ("faster",)),
    "5 %, CV 2 %: power": (1.05, 0.02, ("faster",)),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=40_000)
    args = parser.parse_args()
    print(
        f"{args.sweeps} simulated comparisons per cell, lognormal noise, max_rounds="
        f"{MAX_ROUNDS}; winner: faster or slower; rounds: mean rounds run"
    )
    print()
    header = " | ".join(f"{name}, rounds" for name in TRUTHS)
    print(f"| spending | first look | {header} |")
    print("|---|---:|" + "---:|" * len(TRUTHS))
    for spending in SPENDINGS:
        for first in FIRST_LOOKS:
            design = Design(MAX_ROUNDS, spending, first)
            cells = []
            for i, (ratio, cv, counted) in enumerate(TRUTHS.values()):
                verdicts, rounds, _, _ = simulate(
                    ratio, cv, design, kind="lognormal", seed=100 + i, sweeps=args.sweeps
                )
                found = np.isin(verdicts, counted)
                cells.append(f"{with_se(found)}, {with_se(rounds, percent=False)}")
            print(f"| {spending} | {first} | " + " | ".join(cells) + " |", flush=True)
    print()
    print(
        f"At the same power: the fewest max_rounds (first look 3) that decide a real 10 % at "
        f"CV 5 % in at least {POWER:.0%} of sweeps, and the mean rounds that design runs"
    )
    print()
    print("| spending | max_rounds | power | rounds at 10 % | rounds A/A, CV 5 % | A/A winner |")
    print("|---|---:|---:|---:|---:|---:|")
    for spending in SPENDINGS:
        for max_rounds in range(6, 17):
            design = Design(max_rounds, spending, 3)
            verdicts, rounds, _, _ = simulate(
                1.10, 0.05, design, kind="lognormal", seed=7, sweeps=args.sweeps
            )
            power = verdicts == "faster"
            if power.mean() >= POWER or max_rounds == 16:
                same, same_rounds, _, _ = simulate(
                    1.0, 0.05, design, kind="lognormal", seed=8, sweeps=args.sweeps
                )
                false = np.isin(same, ["faster", "slower"])
                print(
                    f"| {spending} | {max_rounds} | {with_se(power)} | "
                    f"{with_se(rounds, percent=False)} | {with_se(same_rounds, percent=False)} | "
                    f"{with_se(false)} |",
                    flush=True,
                )
                break


if __name__ == "__main__":
    main()
