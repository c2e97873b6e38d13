"""Ctrl-C typed at a real terminal: the sweep runs under a pseudo-terminal as its controlling
terminal, in the foreground, and the test types ^C (byte 0x03) at it, so the terminal's line
discipline sends SIGINT to the whole foreground process group as a person's keyboard does.

One Ctrl-C stops the sweep whether it lands in a job's set-up (before its workers run) or
while the workers train; a second Ctrl-C while the stopped sweep is still writing ends it at
once, losing nothing already on disk; no process is left either way."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from ..conftest import REPO, clean_env
from .test_stopping import _descendants, _left

pytestmark = pytest.mark.slow  # each sweep is a few jobs' set-up on 2 cores

CTRL_C = b"\x03"
LONG = ["steps=100000", "untimed_steps=1", "log_every=1", "eval.enabled=false", "repeats=1"]


class Terminal:
    """A sweep whose controlling terminal is a pseudo-terminal the test types into."""

    def __init__(self, args: list[str]) -> None:
        self.master, slave = os.openpty()

        def controlling_terminal() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # stdin is the slave: it becomes the tty
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        self.process = subprocess.Popen(
            [sys.executable, "run.py", "-m", *args],
            cwd=REPO,
            env=clean_env(),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=controlling_terminal,
        )
        os.close(slave)
        os.set_blocking(self.master, False)
        self.console = b""

    def read(self) -> str:
        """What the terminal has shown so far."""
        try:
            while chunk := os.read(self.master, 65536):
                self.console += chunk
        except (BlockingIOError, OSError):  # nothing yet; or the sweep has gone
            pass
        return self.console.decode(errors="replace")

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            self.read()
            time.sleep(0.05)
        self.read()
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            pytest.fail(f"the sweep ran on {timeout_s:.0f} s after Ctrl-C:\n{self.read()[-3000:]}")
        return self.process.returncode

    def close(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        os.close(self.master)


def _until(condition, terminal: Terminal, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        assert terminal.process.poll() is None, terminal.read()[-3000:]
        terminal.read()
        time.sleep(0.02)
    pytest.fail(f"{what} did not happen:\n{terminal.read()[-3000:]}")


def _step(sweep: Path) -> int:
    """The furthest step any job of the sweep has recorded (-1: none yet)."""
    steps = [-1]
    for partial in sweep.glob("*/metrics.json"):
        try:
            steps.append(json.loads(partial.read_text())["step"])
        except (OSError, ValueError, KeyError):
            continue
    return max(steps)


@pytest.mark.parametrize("moment", ["set-up", "training"])
def test_one_ctrl_c_at_a_terminal_stops_the_sweep_in_set_up_or_training(tmp_path, moment):
    sweep = tmp_path / "sweep"
    terminal = Terminal(["batch=2,3,4", *LONG, f"hydra.sweep.dir={sweep}"])
    try:
        if moment == "set-up":  # the job has its directory, its workers have not stepped
            _until(lambda: any(sweep.glob("*/.hydra")), terminal, "the first job's set-up")
        else:
            _until(lambda: _step(sweep) >= 2, terminal, "the first job's training")
        below = _descendants(terminal.process.pid)
        terminal.type(CTRL_C)
        code = terminal.wait(timeout_s=60)
        console = terminal.read()
    finally:
        terminal.close()
    assert code == 128 + signal.SIGINT, console[-3000:]
    assert "sweep stopped by SIGINT" in console and "never ran" in console, console[-3000:]
    assert "sigval" not in console, "the stop is a stop, whenever it lands"
    results = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert [r["status"] for r in results] in ([], ["interrupted"]), results
    assert not _left(below)


def test_a_second_ctrl_c_ends_the_stopping_sweep_at_once_keeping_what_was_written(tmp_path):
    sweep = tmp_path / "sweep"
    terminal = Terminal(["batch=2,3", *LONG, f"hydra.sweep.dir={sweep}"])
    try:
        _until(lambda: _step(sweep) >= 2, terminal, "the first job's training")
        below = _descendants(terminal.process.pid)
        terminal.type(CTRL_C)
        # The job records itself as interrupted; the sweep then writes its summary. The
        # second Ctrl-C comes once the job's record is on disk, while the summary is made.
        _until(lambda: any(sweep.glob("*/result.json")), terminal, "the interrupted record")
        stopped_at = time.monotonic()
        terminal.type(CTRL_C)
        code = terminal.wait(timeout_s=30)
        ended_in_s = time.monotonic() - stopped_at
    finally:
        terminal.close()
    assert code in (-signal.SIGINT, 128 + signal.SIGINT), terminal.read()[-3000:]
    assert ended_in_s < 5, "the second Ctrl-C ends the sweep at once"
    (record,) = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert record["status"] == "interrupted" and record["metrics"], "what was written is kept"
    assert not _left(below)
