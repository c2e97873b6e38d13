"""Time linkbench against the textbook DDP script (plain_ddp.py) on this machine, in turns.

    python benchmarks/vs_plain.py --preset cpu  --rounds 3 --out cpu.json
    python benchmarks/vs_plain.py --preset h200 --rounds 2 --out h200.json
    python benchmarks/vs_plain.py --preset gpu-eager --rounds 2 --out eager.json

Each round runs every variant of the preset once, in a rotated order, so slow drift of the
machine falls on all variants alike; ratios are medians over rounds against the plain
script's median, with the min-max of the per-round ratios. For every run it records the
command's wall time, the throughput each program measured itself, the time from the
command's start to the end of the first step, and peak GPU memory. The cpu preset also
times a sweep (``-m seed=0,1,2,3``) and reports linkbench's per-job overhead (the time a
job spends outside its training task: process start, rendezvous, set-up, teardown).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Variant:
    name: str
    plain_args: list[str] | None = None  # the plain script's arguments, or None for linkbench
    overrides: list[str] = field(default_factory=list)  # linkbench's Hydra overrides


def _workload(model: str, batch: int, precision: str, steps: int, warmup: int) -> tuple:
    plain = ["--model", model, "--batch", str(batch), "--precision", precision]
    plain += ["--steps", str(steps), "--warmup", str(warmup)]
    if model.startswith("resnet"):
        plain.append("--channels-last")  # what linkbench's resnet configs use on GPU
    ours = [f"model={model}", f"batch={batch}", f"precision={precision}", f"steps={steps}"]
    ours += [f"untimed_steps={warmup}", "task.no_sync_steps=0"]  # the same work as plain
    return plain, ours


def presets() -> dict[str, list[tuple[str, list[Variant]]]]:
    """Named groups of variants; the first variant of a group is its baseline."""
    cpu_plain, cpu_ours = _workload("tiny", 32, "fp32", 300, 30)
    r256_plain, r256_ours = _workload("resnet50", 256, "bf16", 100, 20)
    r32_plain, r32_ours = _workload("resnet50", 32, "bf16", 300, 30)
    return {
        "cpu": [
            (
                "tiny, gloo, 2 ranks, batch 32",
                [
                    Variant("plain eager", [*cpu_plain, "--nproc", "2"]),
                    Variant("linkbench eager", overrides=[*cpu_ours, "devices=2"]),
                ],
            )
        ],
        # Eager alone, as a lone job meets the textbook script (issue: half a job's overhead).
        "gpu-eager": [
            (
                "resnet50 bf16 batch 256, 1 GPU",
                [
                    Variant("plain eager", [*r256_plain, "--nproc", "1"]),
                    Variant("linkbench eager", overrides=r256_ours),
                ],
            ),
            (
                "resnet50 bf16 batch 32, 1 GPU",
                [
                    Variant("plain eager", [*r32_plain, "--nproc", "1"]),
                    Variant("linkbench eager", overrides=r32_ours),
                ],
            ),
        ],
        "h200": [
            (
                "resnet50 bf16 batch 256, 1 GPU",
                [
                    Variant("plain eager", [*r256_plain, "--nproc", "1"]),
                    Variant("linkbench eager", overrides=r256_ours),
                    Variant("linkbench compile", overrides=[*r256_ours, "compile=true"]),
                    Variant(
                        "linkbench compile, one DDP bucket",
                        overrides=[*r256_ours, "compile=true", "strategy.bucket_cap_mb=1000"],
                    ),
                ],
            ),
            (
                "resnet50 bf16 batch 32, 1 GPU",
                [
                    Variant("plain eager", [*r32_plain, "--nproc", "1"]),
                    Variant("linkbench eager", overrides=r32_ours),
                    Variant("linkbench cuda_graphs", overrides=[*r32_ours, "cuda_graphs=true"]),
                    Variant(
                        "linkbench compile reduce-overhead",
                        overrides=[*r32_ours, "compile=true", "compile_mode=reduce-overhead"],
                    ),
                ],
            ),
        ],
    }


def run_variant(variant: Variant, workdir: Path) -> dict:
    """One run of a variant: its own numbers plus the command's wall time."""
    workdir.mkdir(parents=True)
    if variant.plain_args is not None:
        out = workdir / "plain.json"
        command = [sys.executable, str(ROOT / "benchmarks/plain_ddp.py"), *variant.plain_args]
        command += ["--out", str(out)]
    else:
        out = workdir / "result.json"
        command = [sys.executable, str(ROOT / "run.py"), f"hydra.run.dir={workdir}"]
        command += variant.overrides
    started = time.time()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall_s = time.time() - started
    if proc.returncode != 0 or not out.is_file():
        print(f"{variant.name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}", flush=True)
        return {"error": proc.stderr[-4000:], "wall_s": wall_s}
    data = json.loads(out.read_text())
    metrics = data.get("metrics", data)
    return {
        "wall_s": wall_s,
        "samples_per_sec": metrics["samples_per_sec"],
        "time_to_first_step_s": data["first_step_done_at"] - started,
        "max_allocated_gb": metrics.get("max_allocated_gb"),
        "first_step_s": metrics.get("first_step_s"),
    }


def time_sweep(workdir: Path, jobs: int = 4) -> dict:
    """A CPU sweep of ``jobs`` short jobs: wall time and linkbench's per-job overhead."""
    seeds = ",".join(str(s) for s in range(jobs))
    command = [sys.executable, str(ROOT / "run.py"), "-m", f"seed={seeds}", "steps=50"]
    command += ["untimed_steps=10", f"hydra.sweep.dir={workdir}", "hydra/job_logging=disabled"]
    started = time.time()
    proc = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    wall_s = time.time() - started
    if proc.returncode != 0:
        raise SystemExit(f"sweep failed:\n{proc.stderr[-3000:]}")
    results = [json.loads(p.read_text()) for p in sorted(workdir.glob("*/result.json"))]
    overheads = [r["metrics"]["overhead_s"] for r in results]
    return {
        "jobs": jobs,
        "wall_s": wall_s,
        "job_overhead_s": overheads,
        "job_overhead_s_median": statistics.median(overheads),
        "job_durations_s": [r["duration_s"] for r in results],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(presets()), default="cpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", help="run only the groups whose title contains this")
    parser.add_argument("--out", type=Path, help="write every run's numbers here as JSON")
    args = parser.parse_args()
    report: dict = {"preset": args.preset, "groups": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for title, variants in presets()[args.preset]:
            if args.only and args.only not in title:
                continue
            runs: dict[str, list[dict]] = {v.name: [] for v in variants}
            for round_ in range(args.rounds):
                shift = round_ % len(variants)
                for variant in variants[shift:] + variants[:shift]:
                    slug = re.sub(r"[^A-Za-z0-9]+", "_", f"{title}-{round_}-{variant.name}")
                    run = run_variant(variant, Path(tmp) / slug)
                    runs[variant.name].append(run)
                    print(f"[{title}] {round_ + 1}: {variant.name}: {_brief(run)}", flush=True)
            report["groups"][title] = runs
            print(_table(title, runs), flush=True)
        if args.preset == "cpu":
            report["sweep"] = time_sweep(Path(tmp) / "sweep")
            s = report["sweep"]
            print(
                f"\nsweep of {s['jobs']} jobs: {s['wall_s']:.1f} s wall; linkbench's per-job "
                f"overhead median {s['job_overhead_s_median']:.2f} s "
                f"({', '.join(f'{o:.2f}' for o in s['job_overhead_s'])})"
            )
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


def _brief(run: dict) -> str:
    if "error" in run:
        return "failed"
    memory = f", {run['max_allocated_gb']:.2f} GB" if run["max_allocated_gb"] else ""
    return (
        f"{run['samples_per_sec']:,.1f} samples/s, wall {run['wall_s']:.1f} s, first step "
        f"after {run['time_to_first_step_s']:.1f} s{memory}"
    )


def _table(title: str, runs: dict[str, list[dict]]) -> str:
    base_name = next(iter(runs))
    base = runs[base_name]
    lines = [
        f"\n{title} (ratios vs {base_name}: median [min-max over rounds])",
        "| variant | samples/s | throughput ratio | wall s | wall ratio | first step s | peak GB |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, values in runs.items():
        if any("error" in r for r in values + base):
            lines.append(f"| {name} | failed (see its output above) | | | | | |")
            continue
        pairs = list(zip(values, base, strict=True))
        tput = [r["samples_per_sec"] / b["samples_per_sec"] for r, b in pairs]
        wall = [r["wall_s"] / b["wall_s"] for r, b in pairs]
        memory = [r["max_allocated_gb"] for r in values if r["max_allocated_gb"]]
        lines.append(
            f"| {name} | {statistics.median(r['samples_per_sec'] for r in values):,.1f} "
            f"| {_ratio(tput)} | {statistics.median(r['wall_s'] for r in values):.1f} "
            f"| {_ratio(wall)} "
            f"| {statistics.median(r['time_to_first_step_s'] for r in values):.1f} "
            f"| {f'{max(memory):.2f}' if memory else '-'} |"
        )
    return "\n".join(lines)


def _ratio(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"


if __name__ == "__main__":
    main()
