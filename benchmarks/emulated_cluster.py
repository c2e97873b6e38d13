"""The known answers of an emulated cluster, as figures for benchmarks/RESULTS.md.

Runs the sweeps below (as root, about 20 minutes on 2 cores) and prints every figure in
markdown:

    python benchmarks/emulated_cluster.py OUT_DIR            # runs the sweeps into OUT_DIR
    python benchmarks/emulated_cluster.py OUT_DIR --no-run   # only reads sweeps already there

1. bytes through each uplink, seen by its counters against predicted, per strategy;
2. each strategy's step time against computing + the uplink's bytes at its measured bus
   bandwidth + the bytes inside the nodes at theirs - what overlapped (the trace's);
3. the strategies' verdicts against DDP (the committed experiment, emulated_cluster);
4. 2 nodes x 2 ranks predicted from 2 nodes x 1 rank and 1 node x 2 ranks
   (``python -m linkbench.project --cluster 2x2``), against the measured;
5. compression across the slow link (DDP's fp16 hook, HSDP reducing in bf16): the measured
   ratio against the one its fewer bytes predict (the uncompressed run's step with the
   compressed bytes at its measured bus bandwidths: ``analysis/emulated.with_bytes_of``);
6. how the kernel's TCP work shares the cores at each rate: both probes, the synced steps'
   computing (the trace's) and each step against its prediction, at 0.25, 0.5 and 1 Gbit/s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from linkbench.analysis.cluster import inside as cluster_inside
from linkbench.analysis.cluster import measured, predict
from linkbench.analysis.compare import sweep_comparisons
from linkbench.analysis.emulated import link_rows, with_bytes_of
from linkbench.analysis.sequential import sweep_design
from linkbench.analysis.sweep import group, load_sweep, swept_keys
from linkbench.link.emulated import payload_gb_s

REPO = Path(__file__).resolve().parent.parent
EXPERIMENT = "+experiment=emulated_cluster"


def _summary(axis: str, baseline: str) -> list[str]:
    return [f"hydra.callbacks.sweep_summary.axis={axis}",
            f"hydra.callbacks.sweep_summary.baseline={baseline}"]  # fmt: skip


SWEEPS = {
    "strategies": [EXPERIMENT],
    "between": [EXPERIMENT, "interconnect.nodes=2", "devices=2", "strategy=ddp,fsdp,hsdp",
                "repeats=3"],
    "ddp_fp16": [EXPERIMENT, "strategy=ddp", "strategy/comm_hook=none,fp16", "repeats=3",
                 *_summary("strategy/comm_hook", "none")],
    "hsdp_bf16": [EXPERIMENT, "strategy=hsdp", "strategy.reduce_dtype=null,bfloat16",
                  "repeats=3", *_summary("strategy.reduce_dtype", "null")],
    "rates": [EXPERIMENT, "strategy=ddp,hsdp", "interconnect.rate_gbit_s=0.25,1", "repeats=1",
              *_summary("interconnect.rate_gbit_s", "1")],
}  # fmt: skip
# One job, not a sweep: the path inside a node (1 node x 2 ranks), into OUT/inside/job.
INSIDE = [EXPERIMENT, "interconnect.nodes=1", "devices=2", "strategy=ddp", "profile=none"]


def _comparisons(sweep: Path, axis: str, baseline: object):
    return sweep_comparisons(load_sweep(sweep), axis, baseline, design=sweep_design(sweep))


def uplink_bytes(sweep: Path) -> list[str]:
    out = [
        "| strategy | nodes x ranks | uplink | way | predicted MB/step | seen MB/step "
        "(mean over runs) | seen / predicted |",
        "|---|---|---:|---|---:|---:|---:|",
    ]
    by: dict[tuple[str, int, str], list[tuple[float, float]]] = {}
    shape: dict[str, str] = {}
    for result in load_sweep(sweep):
        per_step, link = result["link"]["per_step"], result["link"]
        shape[per_step["strategy"]] = f"{link['nodes']} x {link['ranks_per_node']}"
        for uplink in per_step["uplinks"]:
            for way in ("tx", "rx"):
                key = (per_step["strategy"], uplink["node"], way)
                pair = (uplink[f"predicted_{way}_bytes_per_step"], uplink[f"{way}_bytes_per_step"])
                by.setdefault(key, []).append(pair)
    for (strategy, node, way), pairs in sorted(by.items()):
        predicted = statistics.fmean(p for p, _ in pairs)
        seen = statistics.fmean(s for _, s in pairs)
        out.append(
            f"| {strategy} | {shape[strategy]} | node {node} | {way} | {predicted / 1e6:.3f} | "
            f"{seen / 1e6:.3f} | {seen / predicted:.4f}x |"
        )
    return out


def step_times(sweep: Path) -> list[str]:
    out = ["| configuration | step ms [95% interval] | compute ms | uplink ms | inside ms "
           "| overlapped ms | other ms | predicted ms | measured / predicted |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for r in link_rows(_comparisons(sweep, "strategy", "ddp").configs):
        s = r.step_ms
        out.append(
            f"| {r.label} | {s.mean:.1f} [{s.low:.1f}, {s.high:.1f}] | {r.compute_ms:.1f} | "
            f"{r.comm_ms() - r.node_ms():.1f} | {r.node_ms():.1f} | {r.overlapped_ms:.1f} | "
            f"{r.other_ms:.1f} | {r.predicted_ms():.1f} | {r.error:+.1%} |"
        )
    return out


def verdicts(sweep: Path, axis: str, baseline: object) -> list[str]:
    found = _comparisons(sweep, axis, baseline)
    return [
        f"- {c.arm.label()} vs {c.base.label()}: {c.ratio.estimate:.3f}x "
        f"[{c.ratio.low:.3f}, {c.ratio.high:.3f}] **{c.verdict}** ({c.ratio.runs[0]} vs "
        f"{c.ratio.runs[1]} runs)"
        for c in found.comparisons
    ]


def projection(between: Path, inside: Path, target: Path) -> list[str]:
    inside_gb_s = cluster_inside(load_sweep(inside)[0], str(inside))
    steps: dict[str, list[float]] = {}
    for result in load_sweep(target):
        steps.setdefault(result["strategy"], []).append(result["metrics"]["step_time_ms"])
    out = ["| measured on 2 x 1 (job) | strategy | predicted 2 x 2 ms | measured 2 x 2 ms "
           "(mean) | predicted / measured |", "|---|---|---:|---:|---:|"]  # fmt: skip
    for result in load_sweep(between):
        source = measured(result, result["job_dir"])
        if source.strategy not in steps:
            continue
        p = predict(source, inside_gb_s, 2, 2)
        mean = statistics.fmean(steps[source.strategy])
        out.append(
            f"| {Path(result['job_dir']).name} | {source.strategy} | {p['step_ms']:.1f} | "
            f"{mean:.1f} | {p['step_ms'] / mean - 1:+.1%} |"
        )
    out.append(f"\nInside a node (1 x 2): {inside_gb_s:.3f} GB/s bus bandwidth over its loopback.")
    return out


def compression(sweep: Path, axis: str, baseline: str) -> list[str]:
    found = _comparisons(sweep, axis, baseline)
    rows = {r.label: r for r in link_rows(found.configs)}
    out = []
    for c in found.comparisons:
        row, base = rows[c.arm.label()], rows[c.base.label()]
        predicted = base.step_ms.mean / with_bytes_of(base, row)
        out.append(
            f"- {c.arm.label()} vs {c.base.label()}: {c.ratio.estimate:.3f}x "
            f"[{c.ratio.low:.3f}, {c.ratio.high:.3f}] "
            f"**{c.verdict}**; uplink {row.link_bytes() / 1e6:.1f} MB/step against "
            f"{base.link_bytes() / 1e6:.1f}, inside a node {row.node_bytes / 1e6:.1f} against "
            f"{base.node_bytes / 1e6:.1f}; the fewer bytes alone predict {predicted:.3f}x "
            f"({c.ratio.estimate / predicted - 1:+.1%})"
        )
    return out


def rates(*sweeps: Path) -> list[str]:
    out = ["| strategy | rate Gbit/s | link busbw GB/s (of the payload rate) | node busbw GB/s "
           "| computing ms (trace) | step ms | measured / predicted |",
           "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    rows = []
    for sweep in sweeps:
        results = load_sweep(sweep)
        rows += link_rows(group(results, swept_keys(results)))
    for r in sorted(rows, key=lambda r: (r.strategy, r.rate_gbit_s)):
        out.append(
            f"| {r.strategy} | {r.rate_gbit_s:g} | {r.busbw_gb_s:.4f} "
            f"({r.busbw_gb_s / payload_gb_s(r.rate_gbit_s):.1%}) | {r.node_busbw_gb_s or 0:.3f} | "
            f"{r.compute_ms:.1f} | {r.step_ms.mean:.1f} | {r.error:+.1%} |"
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="where the sweeps go (or are)")
    parser.add_argument("--no-run", action="store_true", help="read sweeps already made")
    args = parser.parse_args()
    runs = {name: ["-m", *overrides, f"hydra.sweep.dir={args.out / name}"]
            for name, overrides in SWEEPS.items()}  # fmt: skip
    runs["inside"] = [*INSIDE, f"hydra.run.dir={args.out / 'inside' / 'job'}"]
    for name, overrides in runs.items():
        if not args.no_run and not (args.out / name).exists():
            subprocess.run([sys.executable, "run.py", *overrides], cwd=REPO, check=True)
    out = args.out
    sections = {
        "1. Bytes through each uplink": uplink_bytes(out / "strategies"),
        "2. Step time against the bytes": step_times(out / "strategies"),
        "3. The strategies against DDP": verdicts(out / "strategies", "strategy", "ddp"),
        "4. 2 x 2 from 2 x 1 and 1 x 2": projection(
            out / "between", out / "inside", out / "strategies"
        ),
        "5. Compression across the slow link": compression(
            out / "ddp_fp16", "strategy/comm_hook", "none"
        )
        + compression(out / "hsdp_bf16", "strategy.reduce_dtype", "null"),
        "6. The cores at each rate": rates(out / "rates", out / "strategies"),
    }
    for title, lines in sections.items():
        print(f"#### {title}\n\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
