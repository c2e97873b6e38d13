"""A sweep folder belongs to one sweep at a time: a second sweep into it is refused while the
first runs, a killed sweep's lock is no lock, and ``resume=true`` continues only the sweep
the folder holds."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linkbench.errors import ConfigError
from linkbench.files import ROUNDS_FILE
from linkbench.launcher import sweep_lock
from tests.conftest import REPO, clean_env, run_cli

HOLD = (
    "import sys, time; from pathlib import Path; from linkbench.launcher import sweep_lock; "
    "sweep_lock.hold(Path(sys.argv[1])); print('held', flush=True); time.sleep(600)"
)


def _holder(folder: Path) -> subprocess.Popen:
    """A real process that holds ``folder``'s lock until killed."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], cwd=REPO,
                               env=clean_env(), stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def test_a_held_folder_is_refused_naming_its_holder_and_a_killed_holder_leaves_no_lock(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(sweep_lock, "_held", {})
    holder = _holder(tmp_path)
    try:
        with pytest.raises(ConfigError) as refused:
            sweep_lock.hold(tmp_path)
        message = str(refused.value)
        assert f"hydra.sweep.dir={tmp_path} is in use by another sweep (pid {holder.pid}" in message
        assert "a folder of its own" in message
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    sweep_lock.hold(tmp_path)  # the kernel dropped the killed process's lock
    assert tmp_path.resolve() in sweep_lock._held
    sweep_lock.hold(tmp_path)  # taken again by its holder: no refusal


def test_a_second_sweep_into_a_running_sweeps_folder_is_refused_before_any_job(tmp_path):
    sweep = tmp_path / "shared"
    quick = ["steps=4", "untimed_steps=1", "log_every=1", "batch=2", "repeats=1",
             "eval.enabled=false", f"hydra.sweep.dir={sweep}"]  # fmt: skip
    first = subprocess.Popen(
        [sys.executable, "run.py", "-m", "seed=0,1", *quick], cwd=REPO, env=clean_env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (sweep / sweep_lock.LOCK_FILE).exists():
            assert first.poll() is None, first.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the first sweep never took its folder"
            time.sleep(0.2)
        second = run_cli(["-m", "seed=2,3", *quick], timeout=120)
        assert first.poll() is None, "the first sweep ended before the second was tried"
    finally:
        _, err = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr[-2000:]
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "is in use by another sweep (pid" in lines[0], second.stderr
    assert first.returncode == 0, err[-3000:]
    jobs = sorted(
        p.name for p in sweep.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    )
    assert all("seed=2" not in j and "seed=3" not in j for j in jobs), jobs
    assert len(jobs) == 2


def test_resume_into_another_sweeps_folder_is_refused_saying_what_differs(cpu_sweep, tmp_path):
    sweep = tmp_path / "sweep"
    shutil.copytree(cpu_sweep.path, sweep)
    before = sorted(p.name for p in sweep.iterdir())
    rounds = (sweep / ROUNDS_FILE).read_text()
    other = run_cli(["-m", "+experiment=cpu_smoke", "batch=8,32", f"hydra.sweep.dir={sweep}",
                     "resume=true"], timeout=120)  # fmt: skip
    assert other.returncode == 2, other.stderr[-2000:]
    lines = other.stderr.strip().splitlines()
    assert len(lines) == 1, other.stderr
    assert f"resume=true: hydra.sweep.dir={sweep} holds another sweep" in lines[0]
    assert "this sweep adds batch=8,32" in lines[0]
    assert sorted(p.name for p in sweep.iterdir()) == before  # nothing run, nothing written
    assert (sweep / ROUNDS_FILE).read_text() == rounds
