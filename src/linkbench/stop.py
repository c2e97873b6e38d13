"""How a worker stops: SIGTERM as a clean stop, the end of its launcher, and the record of
its own failure. Below both the launcher and the worker, which share it (the launcher holds
stops while it records, and asks whether a process is alive).

SIGTERM in a worker raises :class:`Stopped`, so its ``finally`` blocks run (TensorBoard
flushes) before it exits, as Ctrl-C's KeyboardInterrupt does. A worker whose launching
process is gone (``kill -9`` of ``run.py``) has nobody to report to and ranks that wait on a
dead rendezvous: :func:`watch_launcher` notices within a second, stops it as SIGTERM would,
and ends it outright if it is stuck in a collective. Every worker that raises writes
``logs/failure.rank<N>.json`` with the time and its error, from which the launching process
tells which rank failed first (:mod:`linkbench.launcher.failures`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from linkbench.files import failure_file, write_json


class Stopped(BaseException):
    """The worker was asked to stop (SIGTERM): not an error of its own."""


# The exceptions that mean "stopped", each with the signal behind it.
STOP_SIGNALS: dict[type[BaseException], int] = {
    Stopped: signal.SIGTERM,
    KeyboardInterrupt: signal.SIGINT,
}


def _raise_stopped(signum: int, frame: Any) -> None:
    raise Stopped(f"stopped by {signal.Signals(signum).name}")


def _exit_quietly(signum: int, frame: Any) -> None:
    """End the process now, 128 + the signal. Not by raising SystemExit: a signal that
    arrives inside a weakref callback or a __del__ would have it printed as "Exception
    ignored in ..." with a traceback (seen once in CI), and the rank has nothing left to do."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(128 + signum)


def stop_quietly() -> None:
    """From now on a stop signal ends this (main) thread's process with 128 + the signal and
    no traceback: for a rank that has recorded its own failure and is ending (the launcher
    stops the other ranks meanwhile; a SIGTERM then must not print a second traceback from
    torch's process wrapper)."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_quietly)


def stop_on_sigterm() -> None:
    """Turn SIGTERM into :class:`Stopped` in this (main) thread."""
    signal.signal(signal.SIGTERM, _raise_stopped)


LAUNCHER_PID = "LINKBENCH_LAUNCHER_PID"  # set by the launching process for its workers
WATCH_EVERY_S = 1.0
GRACE_S = 5.0  # after the SIGTERM, before the worker ends itself outright


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended; only its parent has not reaped it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended


def _watch(pid: int) -> None:
    while alive(pid):
        time.sleep(WATCH_EVERY_S)
    print(f"linkbench: the launching process {pid} is gone; this worker stops", file=sys.stderr)
    os.kill(os.getpid(), signal.SIGTERM)  # Stopped in the main thread: finally blocks run
    time.sleep(GRACE_S)
    os._exit(128 + signal.SIGTERM)  # the main thread was stuck in a collective


def watch_launcher() -> None:
    """End this worker when the process that launched it is gone (a daemon thread; does
    nothing where no launcher said who it is, as under torchrun)."""
    pid = os.environ.get(LAUNCHER_PID)
    if pid and pid.isdigit() and int(pid) != os.getpid():
        threading.Thread(target=_watch, args=(int(pid),), daemon=True, name="watch").start()


def record_failure(
    log_dir: Path,
    rank: int,
    error: BaseException,
    no_space: bool,
    waited_for: dict[int, str] | None = None,
    timeout_s: float | None = None,
) -> None:
    """Leave this rank's failure, with its time and whether its disk was full, for the
    launching process (where it fits: on a full disk the error itself is what the launcher
    must hear). A collective's timeout adds the ranks this one waited for, and why each
    seems to have stopped responding (:mod:`linkbench.worker.heartbeat`), and the timeout."""
    record = {
        "waited_for": {str(r): why for r, why in (waited_for or {}).items()},
        "timeout_s": timeout_s,
        "time": time.time(),
        "error": f"{type(error).__name__}: {error}".strip(),
        "stopped": isinstance(error, tuple(STOP_SIGNALS)),
        "peer_left": peer_left(error),
        "no_space": no_space,
        "traceback": "".join(traceback.format_exception(error)),
    }
    with contextlib.suppress(OSError):
        write_json(failure_file(log_dir, rank), record)


# What a collective says when another rank's process is gone (gloo's TCP pairs; NCCL's
# watchdog and its socket transport).
PEER_LEFT = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote process exited",
    "Broken pipe",
)


def peer_left(error: BaseException) -> bool:
    """Whether ``error`` is this rank's collective failing because another rank left: the
    other rank's own failure is the one that matters."""
    return any(words in str(error) for words in PEER_LEFT)


@contextlib.contextmanager
def stops_held() -> Iterator[None]:
    """SIGTERM and SIGINT ignored for the block (a failing rank recording its failure, a
    stopped job writing its record); outside the main thread, where Python cannot set
    handlers, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, handler in held.items():
            signal.signal(signum, handler)
