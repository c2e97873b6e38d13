"""Ctrl-C stops a sweep, not only its running job: no further job starts, the summary of what
completed is printed, the stop names what was kept, interrupted and never ran, the process
exits non-zero, and resume=true finishes the sweep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env, run_cli

LONG = ["steps=100000", "untimed_steps=1", "log_every=1", "eval.enabled=false"]


def _start(args: list[str]) -> subprocess.Popen:
    """A sweep in a process group of its own with Ctrl-C's default action, as a terminal
    runs a command (a shell without job control starts background commands with SIGINT
    ignored, and a test suite may run under one)."""
    return subprocess.Popen(
        [sys.executable, "run.py", "-m", *args],
        cwd=REPO,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def _stop(process: subprocess.Popen, signum: int) -> None:
    """Ctrl-C as a terminal sends it (to the whole process group), or SIGTERM to the sweep's
    own process (as a scheduler or ``kill`` does)."""
    if signum == signal.SIGINT:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)


def _wait_for_a_running_job(process: subprocess.Popen, sweep: Path, jobs: int = 1) -> Path:
    """A job of the sweep that has trained 2 steps, once ``jobs`` of them have."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        running = [
            partial.parent
            for partial in sweep.glob("*/metrics.json")
            if json.loads(partial.read_text())["step"] >= 2
        ]
        if len(running) >= jobs:
            return running[0]
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    pytest.fail("no job of the sweep got going")


@pytest.mark.parametrize(
    ("rounds", "signum"),
    [("repeats=1", signal.SIGINT), ("repeats=auto", signal.SIGINT), ("repeats=1", signal.SIGTERM)],
    ids=["fixed-ctrl-c", "adaptive-ctrl-c", "fixed-sigterm"],
)
def test_one_ctrl_c_stops_the_whole_sweep_and_says_what_it_kept(tmp_path, rounds, signum):
    sweep = tmp_path / "sweep"
    process = _start(["batch=2,3,4", rounds, *LONG, f"hydra.sweep.dir={sweep}"])
    try:
        running = _wait_for_a_running_job(process, sweep)
        stopped_at = time.monotonic()
        _stop(process, signum)
        stdout, stderr = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert time.monotonic() - stopped_at < 45, "the sweep stops within seconds"
    assert process.returncode == 128 + signum, stderr[-3000:]
    name = signal.Signals(signum).name
    assert f"sweep stopped by {name}" in stdout, stdout[-3000:]
    assert f"interrupted: {running.name}" in stdout and "never ran" in stdout
    assert "resume=true" in stdout
    results = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert [r["status"] for r in results] == ["interrupted"], "no job started after the stop"
    assert (sweep / "summary.md").is_file()


@pytest.mark.slow  # about 30 s on 2 cores; .ci/run runs it
def test_a_stopped_sweep_is_finished_by_resume(tmp_path):
    sweep = tmp_path / "sweep"
    # Jobs of about 6 s (60 steps of at least 100 ms), long enough to be stopped in.
    quick = ["steps=60", "untimed_steps=2", "log_every=2", "repeats=1", "task.no_sync_steps=0"]
    quick += ["debug.step_delay_ms=100", "eval.enabled=false"]
    process = _start(["batch=2,3", *quick, f"hydra.sweep.dir={sweep}"])
    try:
        _wait_for_a_running_job(process, sweep)
        os.killpg(process.pid, signal.SIGINT)
        stdout, _ = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert "Finish it with:" in stdout
    done = run_cli(["-m", "batch=2,3", *quick, f"hydra.sweep.dir={sweep}", "resume=true"])
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = sorted(json.loads(p.read_text())["status"] for p in sweep.glob("*/result.json"))
    assert statuses == ["completed", "completed"]


def _left(pids: list[int], within_s: float = 15.0) -> list[int]:
    """The processes of ``pids`` still running after up to ``within_s`` seconds: a job's
    forkserver ends when it notices on its next read that its parent has gone, which on a
    loaded machine (2 cores and another test's ranks) takes more than a moment."""
    deadline = time.monotonic() + within_s
    while True:
        left = [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def _descendants(root: int) -> list[int]:
    """Every live process below ``root``, children first."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


@pytest.mark.parametrize(
    "signum",
    [signal.SIGINT, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)],
    ids=["ctrl-c", "sigterm"],
)
def test_a_submitit_local_sweep_stops_with_its_jobs_and_says_what_it_kept(tmp_path, signum):
    """hydra/launcher=submitit_local runs a batch of jobs at once, each in processes of
    submitit's: one Ctrl-C (or SIGTERM to the sweep's process) stops every job, the sweep
    writes its summary and exits 128 + the signal, and no process is left. Stopped once
    both jobs train: a job still starting its ranks when Ctrl-C comes may be SIGKILLed by
    submitit's local controller a second later, before it records itself (its
    Controller.kill_tasks; docs/failures.md), which is no test of linkbench's stop."""
    sweep = tmp_path / "sweep"
    process = _start(["hydra/launcher=submitit_local", "batch=2,3", "repeats=1", *LONG,
                      f"hydra.sweep.dir={sweep}"])  # fmt: skip
    try:
        _wait_for_a_running_job(process, sweep, jobs=2)
        below = _descendants(process.pid)
        _stop(process, signum)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 128 + signum, stderr[-3000:]
    assert f"sweep stopped by {signal.Signals(signum).name}" in stdout, stdout[-3000:]
    assert "0 never ran" in stdout and "resume=true" in stdout
    results = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert [r["status"] for r in results] == ["interrupted", "interrupted"]
    assert (sweep / "summary.md").is_file()
    assert not _left(below)
