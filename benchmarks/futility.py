"""What the futility rule prints and what it costs, by simulation, for docs/statistics.md.

Simulated comparisons (``linkbench.analysis.simulate.futility_study``: the sweeper's rule,
vectorised; the default design, O'Brien-Fleming, looks from round 3 to 8, futility from round
4) over a grid of true ratios and run-to-run noise (lognormal CV). Each comparison is run on
to round 8 whatever the rule says, so the chance printed where the rule stops it ("at this
spread, 8 rounds would decide it with a chance of X %") can be set beside what round 8 would
actually have decided, and the power with the rule beside the power without it.

    python benchmarks/futility.py [--sweeps 20000]

For each cell: the share of comparisons the rule stops, the mean chance printed for them,
the share of them a later round decides (all, and those printed 3-5 %, nearest the line),
the share decided with and without the rule, and
the power the rule costs (paired, the same comparisons), each with its standard error. Then
the same over every cell, by printed chance.
"""

from __future__ import annotations

import argparse

import numpy as np

from linkbench.analysis.sequential import DEFAULT_SPENDING, FIRST_FUTILITY_LOOK, Design
from linkbench.analysis.simulate import futility_study, with_se

RATIOS = (1.0, 1.02, 1.05, 1.10)
CVS = (0.01, 0.02, 0.05, 0.10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=20_000, help="comparisons per cell")
    parser.add_argument("--draws", type=int, default=400, help="futures per chance")
    args = parser.parse_args()
    design = Design(8, DEFAULT_SPENDING, 3)
    print(f"design: {design.describe(0.95)}; futility from round {FIRST_FUTILITY_LOOK}; "
          f"{args.sweeps:,} comparisons per cell, {args.draws} futures per chance")  # fmt: skip
    print("| truth | CV | stopped | chance printed | decided later | printed 3-5 %: decided later "
          "| decided without the rule | with it | power lost |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    printed_all, later_all = [], []
    for seed, (ratio, cv) in enumerate((r, c) for r in RATIOS for c in CVS):
        printed, decided_on, by_rule = futility_study(
            ratio, cv, design, seed, args.sweeps, draws=args.draws
        )
        stopped = ~np.isnan(printed)
        printed_all.append(printed[stopped])
        later_all.append(decided_on[stopped])
        k = int(stopped.sum())
        truth = "A/A" if ratio == 1.0 else f"{ratio - 1:.0%}"
        mean_printed = with_se(printed[stopped]) if k > 1 else ""
        later = with_se(decided_on[stopped]) if k > 1 else ""
        lost = with_se(decided_on.astype(float) - by_rule)[:-2]  # paired: the same comparisons
        near = stopped & (printed >= 0.03)  # the printed chances nearest the 5 % line
        near_later = f"{with_se(decided_on[near])} of {int(near.sum()):,}" if near.sum() > 1 else ""
        print(
            f"| {truth} | {cv:.0%} | {with_se(stopped)} | {mean_printed} | {later} | "
            f"{near_later} | {with_se(decided_on)} | {with_se(by_rule)} | {lost} pts |"
        )
    printed, later = np.concatenate(printed_all), np.concatenate(later_all)
    print("\nEvery cell together, by the chance printed:")
    print("| chance printed | comparisons | decided later |")
    print("|---|---:|---:|")
    for low, high in ((0.0, 0.01), (0.01, 0.02), (0.02, 0.03), (0.03, 0.05)):
        inside = (printed >= low) & (printed < high)
        k = int(inside.sum())
        if k:
            print(f"| {low:.0%} to {high:.0%} | {k:,} | {with_se(later[inside])} |")


if __name__ == "__main__":
    main()
