"""Outlier runs: a run far from its configuration's others, named in the summary as a
diagnostic. The verdict keeps every run, and no second verdict is made without it.

The statistic is the modified z-score on the log scale, \\|log x - median\\| / (1.4826 MAD)
(B. Iglewicz and D. C. Hoaglin, "How to Detect and Handle Outliers", ASQC 1993). Their
fixed rule, 3.5, flags a run in 14-21 % of configurations of 4-8 runs of pure normal noise:
with few runs the MAD is small by chance (with 5 runs one deviation is always 0). Here the
threshold depends on the number of runs: the 95th percentile of the largest score among n
normal runs, found by simulation (:func:`simulated_thresholds`, 400,000 configurations per
n, rounded up), so that a clean configuration of any size has a run flagged in at most 5 %
of sweeps.

A summary names the outliers of every configuration it compares, so each is tested at the
Šidák share of the sweep's 5 % (:func:`per_configuration`): a clean sweep of k
configurations names an outlier anywhere in at most 5 % of sweeps. Thresholds for other
shares, and for more runs than the table holds, are simulated the same way when first asked
for (200,000 configurations, the upper 3-sigma bound of the quantile, cached per process).
"""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any

MIN_RUNS = 4  # below this the median and the MAD say too little
FALSE_FLAGS = 0.05  # the share of clean configurations with a run flagged, at every n

# n -> threshold: the 95th percentile of max |log x - median| / (1.4826 MAD) over n normal
# runs; printed by `python -m linkbench.analysis.outliers`.
THRESHOLDS = {
    4: 6.93, 5: 7.90, 6: 5.53, 7: 5.84, 8: 4.92, 9: 5.06, 10: 4.60, 11: 4.67, 12: 4.38,
    13: 4.45, 14: 4.22, 15: 4.29, 16: 4.13, 17: 4.18, 18: 4.06, 19: 4.10, 20: 4.00, 21: 4.03,
    22: 3.95, 23: 3.98, 24: 3.91, 25: 3.94, 26: 3.89, 27: 3.91, 28: 3.87, 29: 3.89, 30: 3.85,
    31: 3.86, 32: 3.83, 33: 3.85, 34: 3.82, 35: 3.83, 36: 3.81, 37: 3.82, 38: 3.79, 39: 3.81,
    40: 3.79,
}  # fmt: skip


def per_configuration(configurations: int) -> float:
    """The share of clean configurations flagged that keeps a sweep of ``configurations``
    at FALSE_FLAGS anywhere (Šidák)."""
    return 1 - (1 - FALSE_FLAGS) ** (1 / max(1, configurations))


def threshold(n: int, false_flags: float = FALSE_FLAGS) -> float:
    """The score above which one of n runs is an outlier, so that a clean configuration has
    a run flagged in at most ``false_flags`` of sweeps: the table, else simulated."""
    if false_flags == FALSE_FLAGS and n in THRESHOLDS:
        return THRESHOLDS[n]
    return _simulated(n, round(false_flags, 6))


@functools.cache
def _simulated(n: int, false_flags: float, draws: int = 200_000) -> float:
    """The upper 3-sigma bound of the (1 - false_flags) quantile of the largest score among
    n normal runs, rounded up to 0.01."""
    import numpy as np

    largest = _largest_scores(n, draws, np.random.default_rng(20261205 + n))
    tail = draws * false_flags
    index = min(draws - 1, math.ceil(draws - tail + 3 * math.sqrt(tail * (1 - false_flags))))
    value = float(np.sort(largest)[index])
    return math.ceil(value * 100) / 100


def _largest_scores(n: int, draws: int, rng: Any) -> Any:
    """The largest |x - median| / (1.4826 MAD) of each of ``draws`` samples of n normals."""
    import numpy as np

    chunks = []
    size = max(1, 2_000_000 // n)
    for start in range(0, draws, size):
        x = rng.standard_normal((min(size, draws - start), n))
        deviation = np.abs(x - np.median(x, axis=1, keepdims=True))
        mad = np.median(deviation, axis=1)
        chunks.append(deviation.max(axis=1) / (1.4826 * mad))
    return np.concatenate(chunks)


def scores(values: list[float]) -> list[float] | None:
    """Each value's modified z-score on the log scale; None where it is not defined (fewer
    than MIN_RUNS values, a value not above 0, or more than half the values equal)."""
    if len(values) < MIN_RUNS or min(values) <= 0:
        return None
    logs = [math.log(v) for v in values]
    median = statistics.median(logs)
    mad = statistics.median(abs(v - median) for v in logs)
    if mad == 0:
        return None
    return [abs(v - median) / (1.4826 * mad) for v in logs]


def flagged(values: list[float], false_flags: float = FALSE_FLAGS) -> list[int]:
    """Indices of the outliers among ``values`` (one configuration's runs of one metric),
    a clean configuration flagged in at most ``false_flags`` of sweeps."""
    found = scores(values)
    if found is None:
        return []
    limit = threshold(len(values), false_flags)
    return [i for i, score in enumerate(found) if score > limit]


def simulated_thresholds(
    sizes: range, draws: int = 400_000, seed: int = 20261205
) -> dict[int, float]:
    """The 95th percentile of the largest score among n standard normal runs, for each n."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return {n: float(np.quantile(_largest_scores(n, draws, rng), 1 - FALSE_FLAGS)) for n in sizes}


def main() -> None:
    """Print the table of thresholds (rounded up), to check or regenerate THRESHOLDS."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--draws", type=int, default=400_000, help="configurations per n")
    parser.add_argument("--largest", type=int, default=max(THRESHOLDS), help="the largest n")
    args = parser.parse_args()
    found = simulated_thresholds(range(MIN_RUNS, args.largest + 1), args.draws)
    for n, value in found.items():
        print(f"{n}: {math.ceil(value * 100) / 100:.2f}")


if __name__ == "__main__":
    main()
