"""A sweep survives what users do to it: a configuration that crashes, a rank killed with
SIGKILL, a full disk, a stop and its resume, under the default adaptive rounds and the
basic, submitit and joblib launchers. Each sweep runs for real (2 gloo ranks per job)."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from linkbench.files import SWEEP_RUN

from ..conftest import REPO, clean_env, load_result, run_cli
from ..conftest import small_disk as mounted_small_disk
from .test_failures import _worker_pids

SHORT = ["steps=12", "untimed_steps=2", "log_every=2", "batch=4", "task.no_sync_steps=2"]
CRASH = ["debug.crash_at_step=null,4", *SHORT]
HYDRA_LINES = ("Error executing job", "HYDRA_FULL_ERROR")  # a crashing rank shows its own traceback


def _results(sweep: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/result.json")}


def _resume_command(stderr: str) -> list[str]:
    """The command the sweep's last line gives to finish it, as arguments to run.py."""
    line = stderr.strip().splitlines()[-1]
    command = shlex.split(line.split(" with: ", 1)[1])
    assert command[:2] == ["python", "run.py"], line
    return command[2:]


def _no_hydra_lines(done: subprocess.CompletedProcess) -> None:
    text = done.stdout + done.stderr
    assert not any(marker in text for marker in HYDRA_LINES), text[-3000:]


def test_an_adaptive_sweep_runs_past_a_crashing_configuration_and_reruns_only_it(tmp_path):
    """Before: the first failed job ended the whole sweep with Hydra's error lines, no
    summary and no resume command."""
    sweep = tmp_path / "sweep"
    args = ["-m", *CRASH, "hydra.sweeper.max_rounds=3", f"hydra.sweep.dir={sweep}"]
    done = run_cli(args, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    _no_hydra_lines(done)
    results = _results(sweep)
    good = [r for name, r in results.items() if "crash_at_step=null" in name]
    bad = [r for name, r in results.items() if "crash_at_step=4" in name]
    assert len(good) == 3 and all(r["status"] == "completed" for r in good), "every round ran"
    assert len(bad) == 2 and all(r["status"] == "failed" for r in bad), "given up after two"
    rounds = json.loads((sweep / "rounds.json").read_text())
    assert rounds["rounds"][1]["given_up"] == ["debug.crash_at_step=4 " + " ".join(SHORT)]
    summary = (sweep / "summary.md").read_text()
    assert "**no verdict**: debug.crash_at_step=4 has no completed run (2 job(s) failed" in summary
    assert "## Jobs that did not complete" in summary and "raises on purpose" in summary
    assert "# Sweep summary" in done.stdout, "the summary is printed"
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("2 job(s) of this sweep failed: ") and "resume=true" in last
    assert "hydra.sweeper.max_rounds=3" in last

    again = run_cli(_resume_command(done.stderr), timeout=300)
    assert again.returncode == 1, again.stderr[-3000:]
    assert again.stdout.count("); skipping it") == 3, "only what failed reruns"
    assert len(_results(sweep)) == 5


@pytest.mark.slow
def test_a_rank_killed_in_round_two_costs_its_comparison_that_round_only(tmp_path):
    sweep = tmp_path / "sweep"
    long = ["steps=30", "untimed_steps=2", "log_every=2", "batch=4", "task.no_sync_steps=2"]
    args = ["interconnect=nvlink,pcie", *long, "hydra.sweeper.max_rounds=3"]
    process = subprocess.Popen(
        [sys.executable, "run.py", "-m", *args, f"hydra.sweep.dir={sweep}"],
        cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    killed: list[str] = []

    def kill_a_rank_of_round_two() -> None:
        deadline = time.monotonic() + 200
        while time.monotonic() < deadline and process.poll() is None:
            for partial in sweep.glob("*round=1*/metrics.json"):
                try:
                    step = json.loads(partial.read_text())["step"]
                except (OSError, ValueError):
                    continue
                workers = _worker_pids(process.pid)
                if step >= 4 and len(workers) == 2:
                    os.kill(workers[-1], signal.SIGKILL)
                    killed.append(partial.parent.name)
                    return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_a_rank_of_round_two)
    killer.start()
    try:
        stdout, stderr = process.communicate(timeout=400)
    finally:
        if process.poll() is None:
            process.kill()
        killer.join()
    assert killed, stderr[-3000:]
    assert process.returncode == 1, stderr[-3000:]
    results = _results(sweep)
    assert results[killed[0]]["status"] == "failed"
    assert "SIGKILL" in results[killed[0]]["error"] or "killed" in results[killed[0]]["error"]
    assert sum(r["status"] == "completed" for r in results.values()) == len(results) - 1
    assert any("round=2" in name for name in results), "round 3 ran both configurations"
    summary = (sweep / "summary.md").read_text()
    assert f"1 run(s) lost, their jobs failed or were stopped: {killed[0]}" in summary
    assert stderr.strip().splitlines()[-1].startswith(f"1 job(s) of this sweep failed: {killed[0]}")
    assert "Error executing job" not in stdout + stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher",
    [
        ["hydra/launcher=submitit_local"],
        ["hydra/launcher=joblib", "hydra.sweeper.concurrent_jobs=true"],
    ],
    ids=["submitit", "joblib"],
)
def test_other_launchers_run_past_a_failed_job_too(tmp_path, launcher):
    sweep = tmp_path / "sweep"
    rounds = ["hydra.sweeper.max_rounds=2", "hydra.sweeper.min_rounds=2"]
    done = run_cli(["-m", *CRASH, *rounds, *launcher, f"hydra.sweep.dir={sweep}"], timeout=400)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Error executing job" not in done.stdout + done.stderr
    statuses = sorted(
        ("crash_at_step=4" in name, r["status"]) for name, r in _results(sweep).items()
    )
    assert statuses == [(False, "completed")] * 2 + [(True, "failed")] * 2
    assert "**no verdict**" in (sweep / "summary.md").read_text()
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("2 job(s) of this sweep failed") and launcher[0] in last


@pytest.fixture
def small_disk(tmp_path):
    """A 200 KB file system (tmpfs, as root), removed after the test."""
    with mounted_small_disk(tmp_path / "disk", "200k") as disk:
        yield disk


@pytest.mark.slow
def test_a_full_disk_ends_a_sweep_in_one_sentence_and_starts_no_further_job(small_disk):
    """Before: 193 lines (a JSON dump, a UserWarning, Hydra's lines), a 0-byte plot, no
    summary and no resume command."""
    sweep = small_disk / "sweep"
    args = ["-m", "batch=8,16", "repeats=2", "steps=20", "untimed_steps=2"]
    done = run_cli([*args, f"hydra.sweep.dir={sweep}"], timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{sweep} filled up while job ") and "bytes free), so no further" in last
    assert last.endswith("resume=true") and "repeats=2" in last
    assert "UserWarning" not in done.stderr and "Error executing job" not in done.stderr
    said = [line for line in done.stderr.splitlines() if line and not line.startswith("[rank")]
    assert said == [last], "one sentence besides rank 0's own lines"
    written = [p for p in sweep.rglob("*") if p.is_file() and p.suffix != ".log"]
    assert written and not [p for p in written if p.stat().st_size == 0], "none left empty"
    assert not list(sweep.rglob(".*.tmp"))
    full = re.split(r" ran | was set up \(its folder removed\) ", last.split("while job ", 1)[1])[0]
    jobs = [p for p in sweep.iterdir() if p.is_dir() and p.name != SWEEP_RUN]
    if "was set up" in last:  # the disk filled in Hydra's own files of a job that never ran
        assert not (sweep / full).exists(), "its half-written folder is gone"
    else:
        newest = max(jobs, key=lambda p: p.stat().st_ctime).name
        assert newest == full, "the last job, and no other"
    assert "# Sweep summary" in done.stdout, "what was kept is printed"


def test_a_disk_full_before_the_first_job_ran_names_the_job_hydra_was_setting_up(tmp_path):
    """Three pages: multirun.yaml and the first job's config.yaml fit, its hydra.yaml does
    not. Before: 'filled up' named no job (the write that failed names no file)."""
    with mounted_small_disk(tmp_path / "disk", "12k") as disk:
        sweep = disk / "sweep"
        done = run_cli(["-m", "batch=8,16", "repeats=2", "steps=20",
                        f"hydra.sweep.dir={sweep}"], timeout=120)  # fmt: skip
        assert done.returncode == 1, done.stderr[-3000:]
        said = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(said) == 1, done.stderr[-3000:]
        first = "batch=8,repeats=2,round=0,steps=20"
        assert said[0].startswith(f"{sweep} filled up while job {first} was set up (its "), said
        assert "0 job(s) completed" in said[0] and said[0].endswith("resume=true")
        assert not list(sweep.rglob(".*.tmp"))
        assert not [p for p in sweep.iterdir() if p.is_dir()], "no half-written job folder"


def _verdicts(sweep: Path) -> list[str]:
    summary = (sweep / "summary.md").read_text()
    return [
        line.split("**")[1]
        for line in summary.splitlines()
        if line.startswith("- ") and "**" in line
    ]


@pytest.mark.slow
def test_a_stopped_sweep_resumed_with_the_printed_command_keeps_every_setting(tmp_path):
    """Before: the printed command dropped every hydra.* override, so the resumed sweep lost
    its axis ("nothing to compare") and ran up to 8 rounds instead of 3. A known answer:
    60 ms of injected delay per step is slower, stopped and resumed or not."""
    summary_keys = "hydra.callbacks.sweep_summary"
    settings = [
        "debug.step_delay_ms=0,60",
        f"{summary_keys}.axis=debug.step_delay_ms",
        f"{summary_keys}.margin=0.05",
        "hydra.sweeper.max_rounds=3",
    ]
    args = [*settings, "steps=60", "untimed_steps=2", "log_every=2", "eval.enabled=false"]
    whole = tmp_path / "whole"
    assert run_cli(["-m", *args, f"hydra.sweep.dir={whole}"], timeout=600).returncode == 0
    sweep = tmp_path / "stopped"
    process = subprocess.Popen(
        [sys.executable, "run.py", "-m", *args, f"hydra.sweep.dir={sweep}"],
        cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not any(sweep.glob("*step_delay_ms=60*/metrics.json")):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGINT)
        stdout, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130
    command = shlex.split(stdout.strip().splitlines()[-1].split("Finish it with: ", 1)[1])
    assert all(s in command for s in settings), command
    done = run_cli(command[2:], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((sweep / "rounds.json").read_text())["max_rounds"] == 3
    summary = (sweep / "summary.md").read_text()
    assert "## Verdicts: debug.step_delay_ms against debug.step_delay_ms=0" in summary
    assert "of at most 3" in summary
    assert _verdicts(sweep) == _verdicts(whole) == ["slower"]


def _scalar_steps(job: Path, tag: str) -> list[int]:
    steps = []
    for path in sorted(job.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            steps += [event.step for v in event.summary.value if v.tag == tag]
    return steps


@pytest.mark.parametrize(
    "checkpoint",
    [0, pytest.param(10, marks=pytest.mark.slow)],
    ids=["started-over", "from-a-checkpoint"],
)
def test_a_job_run_again_leaves_one_curve_in_tensorboard(tmp_path, checkpoint):
    """Before: the interrupted attempt's steps 10..20 and the new 10..40 in one run (and two
    HParams sessions). Read from the event files themselves, as any reader does."""
    job = tmp_path / "job"
    args = ["steps=40", "log_every=10", "untimed_steps=5", f"checkpoint.every_steps={checkpoint}",
            f"hydra.run.dir={job}"]  # fmt: skip
    assert run_cli([*args, "debug.crash_at_step=30"]).returncode == 1
    assert _scalar_steps(job, "train/loss") == [10, 20]
    done = run_cli([*args, "resume=true"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert _scalar_steps(job, "train/loss") == [10, 20, 30, 40]
    assert _scalar_steps(job, "final/samples_per_sec") == [0], "one record: this attempt's"
    assert len(_scalar_steps(job, "config/text_summary")) == 1
    assert load_result(job)["status"] == "completed"
