"""Ctrl-C in the launching process is never lost: it is remembered until a job takes it.

Python turns SIGINT into a KeyboardInterrupt raised wherever the main thread happens to be.
Where that is a finalizer (``__del__``, a weakref callback: the garbage collector runs them
anywhere, often during the imports and allocations of a job's set-up), Python prints
"Exception ignored in ..." and carries on: the stop is gone, and the job's workers start and
train as if nothing was typed. :func:`listen` installs a handler that raises the same
KeyboardInterrupt and also remembers the signal; :func:`raise_if_lost` (called by the
launcher at the last moment before workers start) raises it again if nothing took it, and
:func:`taken` forgets it once a job or the sweep has handled the stop. The standard library
only: run.py installs it before it imports torch.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_noted: list[int] = []  # a SIGINT that reached this process and that nothing has taken yet


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    if not _noted:
        _noted.append(signum)
    raise KeyboardInterrupt


def listen() -> None:
    """SIGINT raises KeyboardInterrupt and is remembered (module docstring). Leaves alone a
    SIGINT already set to end the process (a stopping sweep's second Ctrl-C) or ignored;
    replaces the handler another library left behind (torch's elastic agent sets its own for
    the time workers run and does not restore the previous one)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) not in (signal.SIG_DFL, signal.SIG_IGN):
        signal.signal(signal.SIGINT, _on_sigint)


def raise_if_lost() -> None:
    """Raise the KeyboardInterrupt of a SIGINT that reached this process and that nothing
    took (it was raised where it was swallowed)."""
    if _noted:
        raise KeyboardInterrupt


def taken() -> None:
    """The stop was handled (the job recorded itself as interrupted, or the sweep stops)."""
    _noted.clear()
