"""The known answers of an emulated link, as figures for benchmarks/RESULTS.md.

Runs the three sweeps `tests/link/test_known_answers.py` asserts on (as root, a few minutes
each on 2 cores) and prints every figure the tests check, in markdown:

    python benchmarks/emulated_link.py OUT_DIR            # runs the sweeps into OUT_DIR
    python benchmarks/emulated_link.py OUT_DIR --no-run   # only reads sweeps already there

1. all_reduce bus bandwidth at 16 and 32 MiB over links of 0.5, 1 and 2 Gbit/s;
2. the committed experiment (resnet18 over 0.5 and 1 Gbit/s, traced) with and without fp16
   compression: the verdicts along the rate, the step time's growth against what the bytes
   predict, each configuration against its prediction;
3. the no_sync probe's and the trace's exposed communication;
4. the projection fed each link's measured all-reduce curve, from every uncompressed job;
5. fp16 compression's ratio on each link against what halving the bytes explains;
6. an A/A sweep on one link: two arms that differ only in nccl.algo, which gloo ignores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from linkbench.analysis.compare import sweep_comparisons
from linkbench.analysis.emulated import link_rows
from linkbench.analysis.measured_link import MeasuredLink, messages_of
from linkbench.analysis.projection import inputs_from_result, projected
from linkbench.analysis.sequential import sweep_design
from linkbench.analysis.sweep import load_sweep
from linkbench.link.emulated import payload_gb_s

REPO = Path(__file__).resolve().parent.parent
RATE = "interconnect.rate_gbit_s"
SWEEPS = {
    "curves": [
        "interconnect=emulated", f"{RATE}=0.5,1,2", "task=allreduce", "task.ops=[all_reduce]",
        "task.min_bytes=1048576", "task.max_bytes=33554432", "task.warmup_iters=1",
        "task.iters=3", "repeats=1",
    ],
    "training": [
        "+experiment=emulated_link", "strategy/comm_hook=none,fp16",
        "hydra.callbacks.sweep_summary.axis=strategy/comm_hook",
        "hydra.callbacks.sweep_summary.baseline=none",
    ],
    "aa": [
        "+experiment=emulated_link", "profile=none", f"{RATE}=1",
        "nccl.algo=ring,tree", "hydra.sweeper.max_rounds=4",
        "hydra.callbacks.sweep_summary.axis=nccl.algo",
        "hydra.callbacks.sweep_summary.baseline=ring", "steps=12",
    ],
}  # fmt: skip


def _comparisons(sweep: Path, axis: str, baseline: object):
    return sweep_comparisons(load_sweep(sweep), axis, baseline, design=sweep_design(sweep))


def bandwidth(curves: Path) -> list[str]:
    out = ["| rate Gbit/s | rate / 8 GB/s | payload GB/s | busbw 16 MiB | busbw 32 MiB |",
           "|---:|---:|---:|---:|---:|"]  # fmt: skip
    for result in sorted(load_sweep(curves), key=lambda r: r["link"]["rate_gbit_s"]):
        rate = float(result["link"]["rate_gbit_s"])
        rows = sorted(result["collectives"], key=lambda row: row["bytes"])[-2:]
        cells = " | ".join(
            f"{r['busbw_gb_s']:.4f} ({r['busbw_gb_s'] / (rate / 8):.1%})" for r in rows
        )
        out.append(f"| {rate:g} | {rate / 8:.4f} | {payload_gb_s(rate):.4f} | {cells} |")
    return out


def training(sweep: Path) -> list[str]:
    found = _comparisons(sweep, RATE, 1)
    rows = {(r.series, r.rate_gbit_s): r for r in link_rows(found.configs)}
    out = ["Verdicts along the rate (0.5 against 1 Gbit/s):", ""]
    for c in found.comparisons:
        series = c.where
        slow, fast = rows[(series, 0.5)], rows[(series, 1.0)]
        grown = slow.step_ms.mean - fast.step_ms.mean
        predicted = slow.exposed_ms() - fast.exposed_ms()
        d = c.step_time_diff_ms
        out.append(
            f"- {series}: {c.ratio.estimate:.3f}x [{c.ratio.low:.3f}, {c.ratio.high:.3f}] "
            f"**{c.verdict}** ({c.ratio.runs[0]} runs each); step time +{grown:.1f} ms "
            f"[{d.low:+.1f}, {d.high:+.1f}] against +{predicted:.1f} ms predicted "
            f"({grown / predicted - 1:+.1%})"
        )
    out += ["", "Each configuration against its prediction, and the exposed communication:", ""]
    out += [
        "| configuration | step ms | predicted ms | error | probe exposed ms "
        "| trace exposed ms | predicted exposed ms |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for config in found.configs:
        row = next(iter(link_rows([config])))
        trace, probe = config.trace_means() or {}, config.mean("comm_exposed_ms")
        out.append(
            f"| {config.label()} | {row.step_ms.mean:.1f} | {row.predicted_ms():.1f} | "
            f"{row.error:+.1%} | {probe.mean if probe else float('nan'):.1f} | "
            f"{trace.get('exposed_comm_ms', float('nan')):.1f} | "
            f"{row.exposed_ms():.1f} |"
        )
    return out


def projection(curves: Path, sweep: Path) -> list[str]:
    links = {float(r["link"]["rate_gbit_s"]): r for r in load_sweep(curves)}
    jobs = [r for r in load_sweep(sweep) if r["settings"].get("strategy/comm_hook") == "none"]
    measured: dict[float, list[float]] = {}
    for result in jobs:
        rate = float(result["link"]["rate_gbit_s"])
        measured.setdefault(rate, []).append(result["metrics"]["step_time_ms"])
    out = ["| job (its link) | projected onto | projected ms | measured ms | error |",
           "|---|---:|---:|---:|---:|"]  # fmt: skip
    for source in jobs:
        inputs = inputs_from_result(source)
        for rate, steps in sorted(measured.items()):
            curve = MeasuredLink.from_result(links[rate], str(rate))
            step = projected(inputs, 2, curve.comm_ms(2, messages_of(source["metrics"])))
            mean = statistics.fmean(steps)
            out.append(
                f"| {Path(source['job_dir']).name} | {rate:g} Gbit/s | {step['step_ms']:.1f} | "
                f"{mean:.1f} | {step['step_ms'] / mean - 1:+.1%} |"
            )
    return out


def compression(sweep: Path) -> list[str]:
    found = _comparisons(sweep, "strategy/comm_hook", "none")
    rows = {(r.series, r.rate_gbit_s): r for r in link_rows(found.configs)}
    out = []
    for c in found.comparisons:
        rate = float(c.where.split("=")[-1])
        none = rows[("strategy/comm_hook=none", rate)]
        explained = none.step_ms.mean / (none.step_ms.mean - none.comm_ms() / 2)
        out.append(
            f"- at {rate:g} Gbit/s: fp16 against none {c.ratio.estimate:.3f}x "
            f"[{c.ratio.low:.3f}, {c.ratio.high:.3f}] **{c.verdict}**; halving the bytes "
            f"explains {explained:.3f}x ({c.ratio.estimate / explained - 1:+.1%})"
        )
    return out


def aa(sweep: Path) -> list[str]:
    found = _comparisons(sweep, "nccl.algo", "ring")
    return [
        f"- nccl.algo=tree against ring (no effect on gloo): {c.ratio.estimate:.3f}x "
        f"[{c.ratio.low:.3f}, {c.ratio.high:.3f}] **{c.verdict}** ({c.ratio.runs[0]} rounds)"
        for c in found.comparisons
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where the three sweeps go (or are)")
    parser.add_argument("--no-run", action="store_true", help="read sweeps already made")
    args = parser.parse_args()
    for name, overrides in SWEEPS.items():
        if not args.no_run and not (args.out / name).exists():
            command = [
                sys.executable,
                "run.py",
                "-m",
                *overrides,
                f"hydra.sweep.dir={args.out / name}",
            ]
            subprocess.run(command, cwd=REPO, check=True)
    sections = {
        "1. Bandwidth": bandwidth(args.out / "curves"),
        "2-3. Training and exposed communication": training(args.out / "training"),
        "4. The projection fed the measured curves": projection(
            args.out / "curves", args.out / "training"
        ),
        "5. Compression": compression(args.out / "training"),
        "6. A/A": aa(args.out / "aa"),
    }
    for title, lines in sections.items():
        print(f"#### {title}\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
