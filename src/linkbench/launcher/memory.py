"""What a job's ranks held in memory, watched from the launching process, so that a rank the
kernel killed can be said to have run out of memory, with its witnesses.

A rank killed with SIGKILL writes nothing, and a dead process's memory can no longer be
read. So while the ranks run, a thread reads each one's high-water mark of resident memory
(``VmHWM`` in ``/proc/<pid>/status``) a few times a second; the ranks are the children of
this process's forkserver, known by their pid (which the launcher's failure report gives).
The kernel's own count of out-of-memory kills in this process's memory cgroup (``oom_kill``
in cgroup v2's ``memory.events`` or v1's ``memory.oom_control``) is read before and after:
where it rose, the kernel says who killed it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import TracebackType

from linkbench.config.host import cgroup_memory_file, memory_limit_bytes
from linkbench.launcher.processes import children

SAMPLE_EVERY_S = 0.25


def _peak_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def oom_kills() -> int | None:
    """The kernel's count of out-of-memory kills in this process's memory cgroup (v2's
    ``memory.events``, v1's ``memory.oom_control``); None where neither can be read."""
    path = cgroup_memory_file("memory.events", "memory.oom_control")
    try:
        for line in path.read_text().splitlines() if path else []:
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemoryWatch:
    """``with MemoryWatch() as watch:`` around a launch; then ``watch.peak_bytes[pid]``,
    ``watch.oom_kills`` (the kills the kernel counted meanwhile, None: unknown)."""

    def __init__(self, every_s: float = SAMPLE_EVERY_S) -> None:
        self.every_s = every_s
        self.peak_bytes: dict[int, int] = {}
        self.oom_kills: int | None = None
        self._before: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> MemoryWatch:
        """Watch (again: a job's repeats each launch their ranks)."""
        self._before = oom_kills()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="linkbench-memory", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * self.every_s + 1)
        after = oom_kills()
        if self._before is not None and after is not None:
            self.oom_kills = after - self._before

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            for server in children(os.getpid()):
                for pid in children(server):
                    if (peak := _peak_bytes(pid)) is not None:
                        self.peak_bytes[pid] = max(peak, self.peak_bytes.get(pid, 0))

    def killed_note(self, pid: int | None, batch: int) -> str:
        """What the watch knows of a rank that SIGKILL ended, from evidence only: the
        cgroup's count of out-of-memory kills (and the kernel's log, where readable), and
        the rank's peak memory against what the job may use. Lowering the batch is advised
        only where memory ran out."""
        total = memory_limit_bytes()
        peak = self.peak_bytes.get(pid) if pid is not None else None
        held = (
            f"it held up to {peak / 1e9:.2f} GB"
            + (f" of the {total / 1e9:.2f} GB this machine lets the job use" if total else "")
            + " when last seen"
            if peak
            else "its memory was not seen"
        )
        lower = f"at batch={batch} per rank; lower batch, or use fewer ranks"
        logged = pid is not None and killed_in_kernel_log(pid)
        if self.oom_kills or logged:
            who = "the kernel's out-of-memory killer ended it (" + (
                f"{self.oom_kills} OOM kill(s) counted in this cgroup during the job)"
                if self.oom_kills
                else "its log says so)"
            )
            return f"{who}; {held}, {lower}"
        near = bool(peak and total and peak >= NEAR_LIMIT * total)
        if self.oom_kills == 0:
            return (
                f"not the out-of-memory killer, by the evidence: this cgroup counted no OOM "
                f"kill during the job and {held}; something outside sent it SIGKILL (kill "
                "-9, a job scheduler, a watchdog)"
            )
        if near:
            near_limit = "perhaps the out-of-memory killer (its memory was near the limit)"
            return f"{near_limit}; {held}, {lower}"
        return (
            f"the kernel's OOM count cannot be read here and {held}, so nothing shows it ran "
            "out of memory; something outside may have sent it SIGKILL (kill -9, a job "
            "scheduler)"
        )


NEAR_LIMIT = 0.9  # a peak this close to the job's memory limit makes running out plausible


def killed_in_kernel_log(pid: int) -> bool:
    """Whether the kernel's log (``/dev/kmsg``, readable by root) holds an out-of-memory kill
    of ``pid``; False where it cannot be read."""
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    marks = (f"Killed process {pid} ", f",pid={pid},")
    try:
        while True:
            try:
                record = os.read(fd, 8192).decode(errors="replace")
            except BlockingIOError:  # the log's end
                return False
            except OSError:  # a record overwritten while reading (EPIPE): read on
                continue
            lowered = record.lower()
            if ("oom" in lowered or "out of memory" in lowered) and any(
                mark in record for mark in marks
            ):
                return True
    finally:
        os.close(fd)
