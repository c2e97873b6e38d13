"""A slow uplink named by measurement, over many runs, as figures for benchmarks/RESULTS.md.

Runs 4 emulated nodes (one rank each, 1 Gbit/s uplinks, a tiny model: the measurement is the
pair sends every emulated job of three or more nodes makes before its task) with node 2's
uplink at 1/2 and at 1/4 of the others' rate, and healthy; each setting as one sweep of
distinct seeds (one job each). Prints, per setting, how often the slow uplink was named
alone, its measured rate against the payload rate that was set, and the healthy runs' false
alarms with their standard error:

    python benchmarks/slow_link.py OUT_DIR                 # 20, 20 and 60 runs (root, ~10 min)
    python benchmarks/slow_link.py OUT_DIR --no-run        # only reads sweeps already there
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

from linkbench.link.emulated import payload_gb_s

REPO = Path(__file__).resolve().parent.parent
SLOW_NODE, NODES, RATE_GBIT_S = 2, 4, 1.0
SETTINGS = {"half": 0.5, "quarter": 0.25, "healthy": 1.0}


def _rates(share: float) -> list[float]:
    return [RATE_GBIT_S * (share if node == SLOW_NODE else 1.0) for node in range(NODES)]


def run(out: Path, runs: dict[str, int]) -> None:
    """Each setting's sweep; a job that fails (a port the elastic agent's store found taken,
    say) is counted as such by :func:`report`, not retried."""
    for name, share in SETTINGS.items():
        if not runs.get(name):
            continue
        rates = ",".join(f"{r:g}" for r in _rates(share))
        seeds = ",".join(str(s) for s in range(runs[name]))
        args = ["-m", "interconnect=emulated", f"devices={NODES}",
                f"interconnect.rate_gbit_s={RATE_GBIT_S:g}",
                f"interconnect.uplink_rates_gbit_s=[{rates}]", f"seed={seeds}", "steps=2",
                "untimed_steps=1", "eval.enabled=false", "task.no_sync_steps=0", "repeats=1",
                "hydra.callbacks.sweep_summary.axis=null",
                f"hydra.sweep.dir={out / name}"]  # fmt: skip
        subprocess.run([sys.executable, "run.py", *args], cwd=REPO, check=False)


def report(out: Path) -> str:
    lines = [
        "| setting | runs (failed) | slow uplink named alone | measured / set payload rate: mean "
        "[min, max] | false alarms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, share in SETTINGS.items():
        results = [json.loads(p.read_text()) for p in sorted((out / name).glob("*/result.json"))]
        links = [r["link"] for r in results if r.get("status") == "completed"]
        failed = len(results) - len(links)
        if not links:
            lines.append(f"| {name} | 0 ({failed}) | not run | - | - |")
            continue

        named = [[s["node"] for s in link["slow_uplinks"]] for link in links]
        n = len(links)
        if share == 1.0:
            alarms = sum(1 for x in named if x) / n
            error = math.sqrt(alarms * (1 - alarms) / n) if n else 0.0
            # none seen: the standard error says nothing; the 95 % upper bound is 3/n
            bound = f" (95 % upper bound {3 / n:.1%})" if alarms == 0 else ""
            lines.append(
                f"| healthy | {n} ({failed}) | - | - | {alarms:.1%} ± {error:.1%}{bound} |"
            )
            continue
        expected = payload_gb_s(RATE_GBIT_S * share)
        alone = sum(1 for x in named if x == [SLOW_NODE])
        ratios = [link["uplinks_measured_gb_s"][SLOW_NODE] / expected for link in links]
        lines.append(
            f"| node {SLOW_NODE} at {share:g} of the rate | {n} ({failed}) | {alone} of {n} "
            f"| {statistics.mean(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}] | - |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--no-run", action="store_true")
    parser.add_argument("--runs", type=int, default=20, help="runs of each slow setting (0: none)")
    parser.add_argument("--healthy-runs", type=int, default=60, help="3/60: a 5 %% bound")
    args = parser.parse_args()
    if not args.no_run:
        run(args.out, {"half": args.runs, "quarter": args.runs, "healthy": args.healthy_runs})
    print(report(args.out))


if __name__ == "__main__":
    main()
