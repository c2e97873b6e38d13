"""Ctrl-C is never lost in the launching process, and never prints a traceback of imports.

Python raises Ctrl-C's KeyboardInterrupt wherever the main thread is; in a finalizer (the
garbage collector runs them anywhere, often during a job's set-up) it is printed as
"Exception ignored" and dropped, and the job's workers then started and trained on (seen
once in CI, with a sweep that ran 60 s past the Ctrl-C). The launcher remembers the signal
and raises it again before any worker starts. The workers' forkserver imports torch with
SIGINT blocked (a Ctrl-C then printed a traceback of those imports), and its workers unblock
it, with Python's own handler."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linkbench.config.machine import Machine
from linkbench.launcher import interrupt
from linkbench.launcher.launch import launch

from ..conftest import REPO, clean_env, job_plan
from .test_stopping import _descendants, _left, _start


class _SwallowsCtrlC:
    """An object whose finalizer is running when Ctrl-C arrives."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)  # Python runs the handler here, inside the finalizer


def test_a_ctrl_c_swallowed_in_a_finalizer_still_stops_the_job_before_its_workers(
    tmp_path, compose_config, monkeypatch
):
    plan = job_plan(compose_config(["steps=5"]), str(tmp_path), [], Machine(cuda_devices=0))
    dropped: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda seen: dropped.append(seen.exc_value))
    previous = signal.getsignal(signal.SIGINT)
    interrupt.listen()
    try:
        finalized = _SwallowsCtrlC()
        del finalized
        assert [type(e) for e in dropped] == [KeyboardInterrupt], "the Ctrl-C was swallowed"
        with pytest.raises(KeyboardInterrupt):
            launch(plan)
        assert not list(Path(plan.log_dir).glob("rank*")), "no worker started"
        assert signal.getsignal(signal.SIGINT) is not previous, "the launcher listens again"
        interrupt.taken()
        interrupt.raise_if_lost()  # a stop handled is not raised again
    finally:
        interrupt.taken()
        signal.signal(signal.SIGINT, previous)


def test_the_forkserver_ignores_ctrl_c_while_it_imports_and_its_workers_do_not():
    """Also: a Ctrl-C while the server starts reaches the launcher although another of its
    threads was free to take the signal (ignoring SIGINT for the start lost it there)."""
    script = """
import os, signal, sys, threading, time
from multiprocessing import forkserver, get_context
from linkbench.launcher import forkserver as ours
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
starting = forkserver.ensure_running
def typed_meanwhile():
    os.kill(os.getpid(), signal.SIGINT)  # to the process: any thread not blocking it takes it
    time.sleep(0.5)
    starting()
forkserver.ensure_running = typed_meanwhile
try:
    ours.start()
    print("lost")
except KeyboardInterrupt:
    print("stopped")
server = forkserver._forkserver._forkserver_pid
os.kill(server, signal.SIGINT)  # Ctrl-C while it imports torch
with get_context("forkserver").Pool(1) as pool:
    handler = pool.apply(signal.getsignal, (signal.SIGINT,))
    blocked = pool.apply(signal.pthread_sigmask, (signal.SIG_BLOCK, []))
print(handler is signal.default_int_handler, signal.SIGINT not in blocked)
print(os.path.exists(f"/proc/{server}"))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=clean_env(python_path=REPO / "src"),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[0] == "stopped", "the Ctrl-C at the server's start was lost"
    assert done.stdout.split()[1:] == ["True", "True", "True"], "workers: Python's handler, "
    "SIGINT unblocked; server: alive"
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr


@pytest.mark.slow  # a sweep's start, five times
@pytest.mark.parametrize("after_s", [0.0, 0.4, 0.8, 1.6, 3.2])
def test_ctrl_c_at_any_moment_of_a_sweeps_start_stops_it_in_one_sentence(tmp_path, after_s):
    """From the sweep's first line (Hydra composing, planning, a job's set-up, its workers
    starting): exit 130, a stop sentence, no traceback, no process left."""
    sweep = tmp_path / "sweep"
    long = ["steps=100000", "untimed_steps=1", "eval.enabled=false", "repeats=1"]
    process = _start(["batch=2,3", *long, f"hydra.sweep.dir={sweep}"])
    stdout = process.stdout.fileno()  # Hydra's log
    os.set_blocking(stdout, False)
    seen = ""
    deadline = time.monotonic() + 120
    while "sweep: 2 configuration(s)" not in seen:
        assert time.monotonic() < deadline, f"the sweep did not start:\n{seen[-3000:]}"
        try:
            seen += os.read(stdout, 65536).decode(errors="replace")
        except BlockingIOError:
            assert process.poll() is None, seen[-3000:]
            time.sleep(0.02)
    time.sleep(after_s)
    below = _descendants(process.pid)
    os.killpg(process.pid, signal.SIGINT)
    try:
        out, err = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"the sweep ran on 60 s after Ctrl-C:\n{(seen + err)[-3000:]}")
    console = seen + out + err
    assert process.returncode == 130, console[-3000:]
    assert "Traceback" not in console and "KeyboardInterrupt" not in console, console[-3000:]
    assert "stopped by SIGINT" in console, console[-3000:]
    results = [json.loads(p.read_text()) for p in sweep.glob("*/result.json")]
    assert [r["status"] for r in results] in ([], ["interrupted"]), results
    assert not _left(below)
