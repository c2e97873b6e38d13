"""How often the emulated link's transport check errs on correct runs: N short training jobs
on an emulated link, each one's verdict counted (verified, not verified, unknown), with the
reason of every run that was not verified. A correct run (ranks in namespaces joined only by
the link) must read verified every time.

    sudo .venv/bin/python benchmarks/link_witness.py [--runs 100] [--rate 1]

Before this check read rank 0's sockets only after its task (when a faster peer may have
closed its connection) and only IPv4 ones, it printed "TRANSPORT NOT VERIFIED ... rank 0 had
no connection to a peer" in 9 of 38 correct runs.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rate", type=float, default=1.0, help="Gbit/s")
    args = parser.parse_args()
    counts: collections.Counter[str] = collections.Counter()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            job = Path(tmp) / f"job{run}"
            job_args = ["interconnect=emulated", f"interconnect.rate_gbit_s={args.rate}",
                        "steps=20", "untimed_steps=5", "log_every=5", "batch=8",
                        "eval.enabled=false", f"seed={run}", f"hydra.run.dir={job}"]  # fmt: skip
            done = subprocess.run([sys.executable, "run.py", *job_args], cwd=REPO,
                                  capture_output=True, text=True, timeout=600)  # fmt: skip
            result = json.loads((job / "result.json").read_text())
            transport = result.get("transport") or {}
            verdict = {True: "verified", False: "not verified"}.get(transport.get("verified"))
            counts[verdict or f"unknown (exit {done.returncode})"] += 1
            if verdict != "verified":
                print(f"run {run}: {verdict}: {transport.get('reason')}", flush=True)
    took = time.monotonic() - started
    print(f"{args.runs} runs at {args.rate:g} Gbit/s in {took:.0f} s: {dict(counts)}")


if __name__ == "__main__":
    main()
