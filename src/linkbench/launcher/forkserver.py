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
from multiprocessing import forkserver

from linkbench.config.machine import OutsideWorld
from linkbench.stop import LAUNCHER_PID

# Imported once by the forkserver the workers fork from; DistributedDataParallel's constructor
# imports torch._dynamo, which takes seconds on its own.
# The last, linkbench.worker.forked, gives the workers SIGINT back (the server starts with
# it ignored).
PRELOAD = ["torch", "torch._dynamo", "linkbench.worker.main", "linkbench.worker.forked"]


def start() -> None:
    """Start the forkserver now (once per process: a sweep's jobs share it). It ends with this
    process; at this process's exit it is ended at once, should it still be importing (it
    notices its parent's end only between requests)."""
    # The workers inherit the server's environment: the launcher they end with if it is killed
    # (linkbench.stop.watch_launcher), this process.
    os.environ[LAUNCHER_PID] = str(os.getpid())
    multiprocessing.set_forkserver_preload(PRELOAD)
    with _ctrl_c_held():  # the server inherits SIGINT ignored: see linkbench.worker.forked
        forkserver.ensure_running()
    atexit.unregister(_end)  # once, however many jobs started it
    atexit.register(_end)


@contextlib.contextmanager
def _ctrl_c_held() -> Iterator[None]:
    """SIGINT ignored for the block, which the processes started in it inherit (across exec);
    blocked first, so that a Ctrl-C meanwhile waits for this process's own handler (Linux
    queues a blocked signal even while it is ignored) instead of being lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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
