"""What a job costs outside its timed steps, on this machine: a 16-job sweep of the default job
and lone default jobs, phase by phase (each job's ``phases_s``), for one checkout of linkbench.

    python benchmarks/job_overhead.py OUT_DIR [--src CHECKOUT] [--lone 3]

``--src`` runs another checkout (its ``run.py`` and ``src/``, with this environment's
packages): the same command before and after a change, on the same machine. Writes
OUT_DIR/overhead.json and prints a table: the sweep's wall time, its timed steps, the seconds
per job outside them, and each phase's seconds per job; each lone job's wall time and its
planning + process start (the first step's wait).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SWEEP = ["-m", "interconnect=nvlink,pcie", "batch=32,256", "repeats=4"]


def run(src: Path, args: list[str], out: Path) -> float:
    """``python run.py ARGS`` of checkout ``src``; its wall time in seconds."""
    env = {**os.environ, "PYTHONPATH": str(src / "src"), "CUDA_VISIBLE_DEVICES": ""}
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(src / "run.py"), *args], cwd=src, env=env,
                          capture_output=True, text=True)  # fmt: skip
    wall = time.monotonic() - started
    (out.with_suffix(".log")).write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): see {out}.log")
    return wall


def jobs_of(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("**/result.json"))]


def timed_s(job: dict) -> float:
    runs = job.get("repeat_metrics") or [job["metrics"]]
    return sum(r.get("timed_steps", 0) * r.get("step_time_ms", 0.0) / 1e3 for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--src", type=Path, default=REPO)
    parser.add_argument("--lone", type=int, default=3, help="lone default jobs to run")
    args = parser.parse_args()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    src = args.src.resolve()
    sweep_dir = out / "sweep"
    wall = run(src, [*SWEEP, f"hydra.sweep.dir={sweep_dir}"], out / "sweep")
    jobs = jobs_of(sweep_dir)
    timed = sum(map(timed_s, jobs))
    phases: dict[str, float] = {}
    for job in jobs:
        for name, seconds in (job.get("phases_s") or {}).items():
            phases[name] = phases.get(name, 0.0) + seconds
    in_jobs = sum(job.get("duration_s", 0.0) for job in jobs)
    lone = []
    for i in range(args.lone):
        job_dir = out / f"lone{i}"
        lone_wall = run(src, [f"hydra.run.dir={job_dir}"], out / f"lone{i}")
        (job,) = jobs_of(job_dir)
        p = job["phases_s"]
        lone.append({"wall_s": lone_wall, "planning_s": p.get("planning", 0.0),
                     "process_start_s": p.get("process_start", 0.0), "phases_s": p})  # fmt: skip
    found = {
        "src": str(src),
        "sweep": {"command": " ".join(SWEEP), "jobs": len(jobs), "wall_s": wall, "timed_s": timed,
                  "outside_timed_per_job_s": (wall - timed) / len(jobs),
                  "sweep_own_s": wall - in_jobs, "phases_s": phases},
        "lone": lone,
    }  # fmt: skip
    (out / "overhead.json").write_text(json.dumps(found, indent=2))
    n = len(jobs)
    outside = (wall - timed) / n
    print(f"sweep {' '.join(SWEEP)}: {n} jobs, {wall:.1f} s wall, {timed:.1f} s timed "
          f"({timed / wall:.0%}), {outside:.2f} s per job outside timed steps")  # fmt: skip
    print(f"  the sweep's own (Hydra, planning, summaries): {(wall - in_jobs) / n:.2f} s per job")
    for name, seconds in sorted(phases.items(), key=lambda kv: -kv[1]):
        print(f"  {name}: {seconds / n:.2f} s per job")
    for row in lone:
        print(f"lone job: {row['wall_s']:.1f} s wall; planning {row['planning_s']:.2f} + process "
              f"start {row['process_start_s']:.2f} s")  # fmt: skip
    if lone:
        first = statistics.median(r["planning_s"] + r["process_start_s"] for r in lone)
        print(f"lone job: median planning + process start {first:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
