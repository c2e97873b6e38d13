"""How a worker stops: SIGTERM as a clean stop, and the record of its own failure.

SIGTERM in a worker raises :class:`Stopped`, so its ``finally`` blocks run (TensorBoard
flushes) before it exits, as Ctrl-C's KeyboardInterrupt does. Every worker that raises
writes ``logs/failure.rank<N>.json`` with the time and its error, from which the launching
process tells which rank failed first (:mod:`linkbench.launcher.failures`).
"""

from __future__ import annotations

import signal
import time
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


def stop_on_sigterm() -> None:
    """Turn SIGTERM into :class:`Stopped` in this (main) thread."""
    signal.signal(signal.SIGTERM, _raise_stopped)


def record_failure(log_dir: Path, rank: int, error: BaseException) -> None:
    """Leave this rank's failure, with its time, for the launching process."""
    write_json(
        failure_file(log_dir, rank),
        {
            "time": time.time(),
            "error": f"{type(error).__name__}: {error}".strip(),
            "stopped": isinstance(error, tuple(STOP_SIGNALS)),
        },
    )
