"""A rank the kernel kills for want of memory: the job says so, with its witnesses. The job
runs for real in a memory cgroup of its own with a 3 GB limit (as root), so the kernel's
out-of-memory killer acts there and nowhere else on the machine."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env, load_result

LIMIT_BYTES = 3 * 1024**3


def _own_memory_cgroup() -> tuple[Path, str] | None:
    """This process's memory cgroup directory and the name of its limit file (v1 or v2)."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "memory":
            return Path("/sys/fs/cgroup/memory") / path.lstrip("/"), "memory.limit_in_bytes"
        if controllers == "" and (Path("/sys/fs/cgroup") / "cgroup.controllers").exists():
            return Path("/sys/fs/cgroup") / path.lstrip("/"), "memory.max"
    return None


@contextlib.contextmanager
def _cgroup(limit_bytes: int) -> Iterator[Path]:
    """A child memory cgroup with this limit, removed (and emptied) after the test."""
    own = _own_memory_cgroup()
    if os.geteuid() != 0 or own is None:
        pytest.skip("needs root and a memory cgroup to make a child of")
    parent, limit_file = own
    group = parent / f"linkbench-test-{os.getpid()}-{limit_bytes}"
    try:
        group.mkdir()
        (group / limit_file).write_text(str(limit_bytes))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    try:
        yield group
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.2)


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A child memory cgroup with a 3 GB limit."""
    with _cgroup(LIMIT_BYTES) as group:
        yield group


def _in_cgroup(group: Path, args: list[str]) -> subprocess.CompletedProcess:
    procs = group / "cgroup.procs"
    return subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: procs.write_text(str(os.getpid())),
    )  # fmt: skip


@pytest.mark.slow
def test_a_rank_killed_out_of_memory_is_said_with_its_peak_and_batch(memory_cgroup, tmp_path):
    """Before: "killed by SIGKILL (exit code -9)" and nothing else. batch=7000 is a rank the
    plan's estimate puts at about 2.3 GB: one fits the 3 GB (so the plan warns and starts),
    two do not. The kernel picks a rank, not the launcher (oom_score_adj 1000)."""
    job = tmp_path / "job"
    done = _in_cgroup(memory_cgroup, ["batch=7000", "steps=4", "untimed_steps=1", "log_every=2",
                                      f"hydra.run.dir={job}"])  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    assert "a rank may be killed out of memory" in done.stdout + done.stderr  # the warning
    error = load_result(job)["error"]
    assert "killed by SIGKILL" in error, error
    assert "the kernel's out-of-memory killer ended it (" in error, error
    assert "it held up to " in error and "GB of the 3.22 GB this machine lets the job use" in error
    assert "at batch=7000 per rank; lower batch" in error


def test_a_job_whose_one_rank_cannot_fit_is_refused_before_it_starts(tmp_path):
    """Before: in a 700 MB cgroup, batch=60000 was warned of ("about 1126 might fit") and
    started, and the kernel killed the launcher (it held ~800 MB of torch, oom_score_adj 0):
    exit 137, no sentence, no result.json."""
    with _cgroup(700 * 1024**2) as group:
        done = _in_cgroup(group, ["batch=60000", f"hydra.run.dir={tmp_path / 'job'}"])
    assert done.returncode == 2, done.stderr[-3000:]
    said = done.stderr.strip().splitlines()
    assert len(said) == 1 and "not even one rank would fit; lower batch (about" in said[0]
    assert not (tmp_path / "job" / "logs").exists(), "no worker started"
