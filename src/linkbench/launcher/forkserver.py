"""The forkserver a job's workers fork from, started as soon as the launching process knows it
will launch workers: its imports (torch, the worker: seconds) then run beside this process's
own imports and planning instead of after them. The standard library only, so that run.py
starts it before it imports torch."""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator, Mapping
from multiprocessing import forkserver, resource_tracker

from linkbench.config.machine import OutsideWorld
from linkbench.stop import LAUNCHER_PID

# Imported once by the forkserver the workers fork from; DistributedDataParallel's constructor
# imports torch._dynamo, which takes seconds on its own.
# The last, linkbench.worker.forked, unblocks SIGINT in every worker the server forks (the
# server starts, and stays, with it blocked).
PRELOAD = ["torch", "torch._dynamo", "linkbench.worker.main", "linkbench.worker.forked"]


def start() -> None:
    """Start the forkserver now (once per process: a sweep's jobs share it). It ends with this
    process; at this process's exit it is ended at once, should it still be importing (it
    notices its parent's end only between requests)."""
    # The workers inherit the server's environment: the launcher they end with if it is killed
    # (linkbench.stop.watch_launcher), this process.
    os.environ[LAUNCHER_PID] = str(os.getpid())
    multiprocessing.set_forkserver_preload(PRELOAD)
    # The server starts the resource tracker first, and the tracker's start unblocks SIGINT
    # after its own (multiprocessing.resource_tracker): started here, outside the hold.
    resource_tracker.ensure_running()
    with _ctrl_c_held():  # the server inherits SIGINT blocked: see linkbench.worker.forked
        forkserver.ensure_running()
    atexit.unregister(_end)  # once, however many jobs started it
    atexit.register(_end)


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """SIGINT blocked in this thread for the block, which a process started in it inherits
    (the mask survives fork and exec), and a Ctrl-C meanwhile held back until the block ends.

    Only the mask and a handler that records: ignoring SIGINT here instead (SIG_IGN) loses a
    Ctrl-C typed meanwhile, since Linux hands a signal sent to the process to another of its
    threads that does not block it, which then drops it as ignored (seen in CI: a sweep that
    trained on 60 s after a Ctrl-C at its first job's set-up)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    typed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: typed.append(signum))
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one pending: recorded
        signal.signal(signal.SIGINT, previous)
    if typed:  # the Ctrl-C, to the handler it was for
        signal.raise_signal(signal.SIGINT)


def start_early(environ: Mapping[str, str]) -> None:
    """:func:`start`, at a job's entry, unless an outside launcher started this process as
    one rank of a world (torchrun's variables, a task of a submitit job), which launches no
    worker of its own."""
    if OutsideWorld.from_env(environ) is None and not environ.get("SUBMITIT_EXECUTOR"):
        start()


def _end() -> None:
    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
