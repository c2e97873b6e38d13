"""Can an adaptive sweep decide sooner? Two designs against the default, by simulation with a
truth we choose, and the one fact about real runs that decides between them.

The default design (O'Brien-Fleming, looks from round 3 to 8, futility from round 4) takes
a run as its unit: each round adds one paired log ratio. Two ways to decide sooner:

- **an earlier first look** (``hydra.sweeper.min_rounds=2``), the rounds still the unit;
- **within-run variance**: a run's timing windows as the samples, so one round already has a
  spread (Welch's interval on the windows' log throughputs, arm against baseline). It is
  valid only where a run's mean varies no more than its windows say: where runs differ among
  themselves (placement, clocks, a neighbour, a warm cache), the windows understate the
  error. *windows at round 1*: Welch at round 1 (at ``--alpha``), then the default design;
  *windows if homogeneous*: at round 2, Welch on both rounds' windows where Cochran's Q of
  the two pairs shows no between-run spread (p >= 0.2), else the default design.

Each run's log throughput is its truth plus a between-run effect (SD ``b``) plus the mean
of ``W`` windows (SD ``w`` each; AR(1) correlation ``rho`` between neighbours). The study
prints, per design and ``b`` (as a multiple of the windows' own error of a run mean,
``w / sqrt(W)``): the share of A/A comparisons that name a winner, and the power and mean
rounds for a real 5 % difference. A design may become the default only where A/A stays at
most 5 % and power at least 80 % over the ``b`` real runs show.

``--sweep DIR`` reads that ``b`` from a finished sweep (its jobs' ``perf/step_time_ms``
windows in TensorBoard, configurations with two runs or more): per configuration, the SD of
its runs' mean log throughput against the SD its windows predict.

    python benchmarks/decide_sooner.py [--sweeps 20000] [--sweep DIR]
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

from linkbench.analysis.sequential import DEFAULT_SPENDING, Design
from linkbench.analysis.simulate import decide, with_se

MAX_ROUNDS = 8
WINDOWS = 10  # timing windows per run (steps / log_every)
WINDOW_CV = 0.05  # one window's log-throughput SD
RHO = (0.0, 0.5)  # neighbouring windows' correlation
B_MULTIPLES = (0.0, 0.5, 1.0, 2.0, 4.0)  # between-run SD in units of w / sqrt(W)
TRUTHS = {"A/A: winner": 1.0, "5 %: power": 1.05}
HOMOGENEOUS_P = 0.2


def windows(rng: np.random.Generator, sweeps: int, rounds: int, w: float, rho: float) -> np.ndarray:
    """(sweeps, rounds, WINDOWS) AR(1) window noise of marginal SD ``w``."""
    e = rng.standard_normal((sweeps, rounds, WINDOWS))
    x = np.empty_like(e)
    x[..., 0] = e[..., 0]
    for j in range(1, WINDOWS):
        x[..., j] = rho * x[..., j - 1] + math.sqrt(1 - rho * rho) * e[..., j]
    return w * x


def runs(
    rng: np.random.Generator, truth: float, sweeps: int, b: float, rho: float
) -> tuple[np.ndarray, np.ndarray]:
    """(arm, baseline) window log throughputs, (sweeps, rounds, WINDOWS) each."""

    def arm(log_truth: float) -> np.ndarray:
        effect = b * rng.standard_normal((sweeps, MAX_ROUNDS, 1))
        return log_truth + effect + windows(rng, sweeps, MAX_ROUNDS, WINDOW_CV, rho)

    return arm(math.log(truth)), arm(0.0)


def welch(a: np.ndarray, c: np.ndarray, alpha: float, margin: float) -> np.ndarray:
    """The verdict ("" undecided) of Welch's interval on windows ``a`` against ``c`` (last
    axis the samples), by the sweeper's rule: equal inside the margin, a winner outside it."""
    n = a.shape[-1]
    va, vc = a.var(axis=-1, ddof=1) / n, c.var(axis=-1, ddof=1) / n
    df = (va + vc) ** 2 / (va**2 / (n - 1) + vc**2 / (n - 1))
    half = stats.t.ppf(1 - alpha / 2, df) * np.sqrt(va + vc)
    est = a.mean(axis=-1) - c.mean(axis=-1)
    lo, hi = np.exp(est - half), np.exp(est + half)
    ratio = np.exp(est)
    equal = (lo >= 1 - margin) & (hi <= 1 + margin)
    decided = ((ratio > 1 + margin) | (ratio < 1 - margin)) & ((lo > 1) | (hi < 1))
    return np.where(equal, "equal", np.where(decided, np.where(ratio > 1, "faster", "slower"), ""))


def study(design_name: str, truth: float, b: float, rho: float, sweeps: int, alpha: float,
          seed: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """(verdicts, rounds run) of ``sweeps`` simulated comparisons under one design."""
    rng = np.random.default_rng(seed)
    a, c = runs(rng, truth, sweeps, b, rho)
    pairs = a.mean(axis=-1) - c.mean(axis=-1)  # each round's paired log ratio
    first = 2 if design_name == "first look 2" else 3
    verdicts, rounds, _, _ = decide(pairs, Design(MAX_ROUNDS, DEFAULT_SPENDING, first))
    margin = 0.02
    if design_name == "windows at round 1":
        early = welch(a[:, 0], c[:, 0], alpha, margin)
    elif design_name == "windows if homogeneous":
        n = WINDOWS
        se2 = a[:, :2].var(axis=-1, ddof=1) / n + c[:, :2].var(axis=-1, ddof=1) / n
        weights = 1 / se2
        pooled = (weights * pairs[:, :2]).sum(axis=1) / weights.sum(axis=1)
        q = (weights * (pairs[:, :2] - pooled[:, None]) ** 2).sum(axis=1)
        homogeneous = stats.chi2.sf(q, 1) >= HOMOGENEOUS_P
        both = welch(a[:, :2].reshape(sweeps, -1), c[:, :2].reshape(sweeps, -1), alpha, margin)
        early = np.where(homogeneous, both, "")
    else:
        return verdicts, rounds
    at = 1 if design_name == "windows at round 1" else 2
    taken = early != ""
    verdicts = np.where(taken, early, verdicts)
    rounds = np.where(taken, at, rounds)
    return verdicts, rounds


DESIGNS = ("default (first look 3)", "first look 2", "windows at round 1",
           "windows if homogeneous")  # fmt: skip


def simulated(sweeps: int, alpha: float) -> None:
    unit = WINDOW_CV / math.sqrt(WINDOWS)
    print(
        f"{sweeps:,} simulated comparisons per cell; {WINDOWS} windows a run, window SD "
        f"{WINDOW_CV:.0%}, so a run mean's window error w/sqrt(W) = {unit:.2%}; b: the SD "
        f"between runs beyond that, in units of it; window tests at alpha {alpha}; max_rounds "
        f"{MAX_ROUNDS}; margin 2 %"
    )
    print()
    print("| design | rho | b | A/A: winner | A/A: rounds | 5 %: power | 5 %: rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for design_name in DESIGNS:
        for rho in RHO:
            for k, multiple in enumerate(B_MULTIPLES):
                cells = []
                for i, truth in enumerate(TRUTHS.values()):
                    seed = 1000 * k + 10 * i + int(10 * rho)
                    verdicts, rounds = study(design_name, truth, multiple * unit, rho, sweeps,
                                             alpha, seed)  # fmt: skip
                    counted = ("faster", "slower") if truth == 1.0 else ("faster",)
                    cells += [with_se(np.isin(verdicts, counted)),
                              with_se(rounds, percent=False)]  # fmt: skip
                print(f"| {design_name} | {rho} | {multiple:g} | " + " | ".join(cells) + " |",
                      flush=True)  # fmt: skip


def measured(sweep: Path) -> None:
    """Per configuration of a finished sweep: its runs, windows, the SD of run means (log
    throughput) and the SD its windows predict, and their ratio (b's multiple plus one)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    by_config: dict[str, list[np.ndarray]] = defaultdict(list)
    folders = sorted({e.parent for e in sweep.glob("*/**/events.out.tfevents.*")})
    for folder in folders:
        job = folder.relative_to(sweep).parts[0]
        if job.startswith(("_", ".")):
            continue
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        if "perf/step_time_ms" not in acc.Tags()["scalars"]:
            continue
        times = np.array([e.value for e in acc.Scalars("perf/step_time_ms")])
        config = ",".join(p for p in job.split(",") if not p.startswith(("round=", "repeats=")))
        by_config[config].append(-np.log(times))
    print("| configuration | runs | windows a run | SD of run means | SD the windows predict "
          "| ratio |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for config, logs in sorted(by_config.items()):
        if len(logs) < 2:
            continue
        means = np.array([x.mean() for x in logs])
        predicted = math.sqrt(np.mean([x.var(ddof=1) / len(x) for x in logs]))
        observed = float(means.std(ddof=1))
        print(f"| {config or '(the job)'} | {len(logs)} | {np.mean([len(x) for x in logs]):.0f} "
              f"| {observed:.2%} | {predicted:.2%} | {observed / predicted:.1f}x |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=20_000, help="comparisons per cell")
    parser.add_argument("--alpha", type=float, default=0.05, help="the window tests' level")
    parser.add_argument("--sweep", type=Path, help="a finished sweep: its between-run spread")
    args = parser.parse_args()
    if args.sweep:
        measured(args.sweep)
    else:
        simulated(args.sweeps, args.alpha)


if __name__ == "__main__":
    main()
