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


@pytest.fixture
def memory_cgroup() -> Iterator[Path]:
    """A child memory cgroup with a 3 GB limit, removed (and emptied) after the test."""
    own = _own_memory_cgroup()
    if os.geteuid() != 0 or own is None:
        pytest.skip("needs root and a memory cgroup to make a child of")
    parent, limit_file = own
    group = parent / f"linkbench-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / limit_file).write_text(str(LIMIT_BYTES))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here: {error}")
    yield group
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


@pytest.mark.slow
def test_a_rank_killed_out_of_memory_is_said_with_its_peak_and_batch(memory_cgroup, tmp_path):
    """Before: "killed by SIGKILL (exit code -9)" and nothing else. 100,000 samples of
    3x32x32 float32 are 1.2 GB per rank before any activation: two ranks cannot fit 3 GB."""
    job = tmp_path / "job"
    procs = memory_cgroup / "cgroup.procs"
    done = subprocess.run(
        [sys.executable, "run.py", "batch=100000", "steps=4", "untimed_steps=1", "log_every=2",
         f"hydra.run.dir={job}"],
        cwd=REPO, env=clean_env(), capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: procs.write_text(str(os.getpid())),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    error = load_result(job)["error"]
    assert "killed by SIGKILL" in error, error
    assert "the kernel's out-of-memory killer ended it (" in error, error
    assert "it held up to " in error and "GB of the 3.22 GB this machine lets the job use" in error
    assert "at batch=100000 per rank; lower batch" in error
