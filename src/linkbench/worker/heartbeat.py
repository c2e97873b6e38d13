"""Which rank stopped responding, when a collective times out.

A collective that times out fails on the ranks that reached it, waiting for one that did
not; their errors ("Timed out waiting 20000ms for recv") name no peer, and the rank that
hung records nothing. So every rank beats: a daemon thread writes, every
:data:`BEAT_S` seconds, the rank's step, pid, host and time into the job's rendezvous
store (a connection of its own). A rank whose collective times out reads every rank's beat
and names the ones that stopped responding: a beat that does not change while it watches
for :data:`WATCH_S` (the process was stopped, is stuck in the kernel, or its host is gone;
on this host its process state says which), or a live beat at an earlier step (busy
outside the collective). Its failure
record carries them (``waited_for``) for the launcher's "failed first"
(:mod:`linkbench.launcher.failures`)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch.distributed as dist

BEAT_S = 2.0
WATCH_S = 1.5 * BEAT_S  # a rank that beats not once while its peer watches this long is stuck
KEY = "linkbench/heartbeat/{rank}"
READ_TIMEOUT_S = 5.0
# What a collective or the store says when its timeout fires (gloo, NCCL's watchdog, c10d).
TIMED_OUT = ("Timed out waiting", "timed out", "Application timeout caused pair closure",
             "Watchdog caught collective operation timeout", "Socket Timeout",
             "wait timeout")  # fmt: skip
PROCESS_STATES = {
    "T": "its process is stopped (SIGSTOP, Ctrl-Z or a debugger)",
    "t": "its process is stopped by a debugger",
    "D": "its process waits in the kernel (uninterruptible I/O)",
    "Z": "its process has exited",
}

_step = 0  # the step this rank is in, read by the beating thread


def at_step(step: int) -> None:
    """This rank now runs ``step`` (what its beats say)."""
    global _step
    _step = step


class Heartbeat:
    """``Heartbeat(host, port, rank, world_size)``: beats until :meth:`stop`; a beat that
    cannot be written (the store is gone at the job's end) ends the thread quietly."""

    def __init__(self, host: str, port: int, rank: int, world_size: int) -> None:
        self.rank, self.world_size = rank, world_size
        # A client of its own, counted in no rendezvous (world_size None).
        self._store = dist.TCPStore(host, port, None, is_master=False,
                                    timeout=timedelta(seconds=READ_TIMEOUT_S))  # fmt: skip
        self._stop = threading.Event()
        self._beat()
        self._thread = threading.Thread(target=self._run, name="linkbench-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        beat = {
            "step": _step,
            "time": time.time(),
            "pid": os.getpid(),
            "host": socket.gethostname(),
        }
        self._store.set(KEY.format(rank=self.rank), json.dumps(beat))

    def _run(self) -> None:
        while not self._stop.wait(BEAT_S):
            try:
                self._beat()
            except Exception:  # the store ended with the job
                return

    def stop(self) -> None:
        self._stop.set()

    def unresponsive(self, watch_s: float | None = None) -> dict[int, str]:
        """{rank: why it seems to have stopped responding} among the other ranks: a rank
        whose beat does not change while this one watches for ``watch_s`` seconds (by
        default WATCH_S: a live rank beats at least once in that time), or whose beat is
        live but behind this rank's step; a rank with no beat at all is named as such."""
        before = self._beats()
        time.sleep(WATCH_S if watch_s is None else watch_s)
        now, after, mine = time.time(), self._beats(), _step
        found: dict[int, str] = {}
        for rank, beat in after.items():
            if beat is None:
                found[rank] = "it never beat (it did not start its heartbeat)"
            elif beat == before[rank]:
                age = now - beat["time"]
                why = f"no heartbeat for {age:.0f} s (the last from step {beat['step']})"
                state = _process_state(beat) if beat["host"] == socket.gethostname() else None
                found[rank] = why + (f"; {state}" if state else "")
            elif beat["step"] < mine:
                found[rank] = (
                    f"its heartbeat is live but it is at step {beat['step']}, behind step "
                    f"{mine}: busy outside the collective"
                )
        return found

    def _beats(self) -> dict[int, dict[str, Any] | None]:
        """Every other rank's last beat now (None where it has none)."""
        beats: dict[int, dict[str, Any] | None] = {}
        for rank in range(self.world_size):
            if rank != self.rank:
                try:
                    beats[rank] = json.loads(self._store.get(KEY.format(rank=rank)))
                except Exception:
                    beats[rank] = None
        return beats


def _process_state(beat: dict[str, Any]) -> str | None:
    """What this host's kernel says of the process that beat, where it says anything."""
    try:
        stat = Path(f"/proc/{beat['pid']}/stat").read_text()
    except OSError:
        return "its process is gone"
    state = stat.rsplit(")", 1)[-1].split()[0]
    return PROCESS_STATES.get(state)


def timed_out(error: BaseException) -> bool:
    """Whether ``error`` is a collective's (or the store's) timeout firing."""
    return any(words in str(error) for words in TIMED_OUT)


def start(rank: int, world_size: int, store: Any | None) -> Heartbeat | None:
    """This rank's heartbeat on the job's rendezvous store (``store``, the emulated link's,
    else the launcher's at MASTER_ADDR:MASTER_PORT); None where there is no such store (a
    single process, an outside launcher's other rendezvous)."""
    if world_size < 2:
        return None
    host, port = (store.host, store.port) if store is not None else (
        os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT"))  # fmt: skip
    if not host or not port:
        return None
    with contextlib.suppress(Exception):  # a rendezvous without a TCP store: no heartbeat
        return Heartbeat(str(host), int(port), rank, world_size)
    return None
