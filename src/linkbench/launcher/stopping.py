"""A sweep its user can stop: the first Ctrl-C or SIGTERM ends the sweep, not only a job.

The signal reaches the running job's workers and launcher as before: the workers stop, the
job's ``result.json`` says ``interrupted`` and keeps what was measured. :func:`request`
(called by the job) then marks the sweep as stopping and gives SIGINT and SIGTERM back
their default action, so a second one ends the process at once, losing nothing already on
disk. The sweeper (:class:`OneJobAtATime`) starts no further job; it prints the summary of
what completed, which jobs were kept, which was interrupted and how many never ran, how
to finish the sweep (``resume=true`` into the same directory), and exits with 128 + the
signal's number. A launcher that runs a batch of jobs at once in processes of its own
(submitit's) is wrapped by :class:`BatchAtOnce` instead: the stop is passed on to every job
of the batch, and the sweep waits for them before it says the same.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from linkbench.analysis.report import SummaryNotWritten, own_summary_settings, write_summary
from linkbench.analysis.sweep import load_sweep
from linkbench.files import SUMMARY_MD
from linkbench.launcher import interrupt
from linkbench.launcher.processes import children
from linkbench.launcher.sweep_end import resume_command
from linkbench.stop import alive

# How long a stopped sweep waits for the jobs it started to end (each job's own launcher
# waits for its ranks, within the elastic agent's 30 s, before it exits).
JOBS_END_WITHIN_S = 60.0

log = logging.getLogger("linkbench")

_requested: list[str] = []  # the signal's name, once a stop was asked for


def request(signal_name: str) -> None:
    """Stop the sweep after the job in progress; a second signal now ends the process."""
    if not _requested:
        _requested.append(signal_name)
    interrupt.taken()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def requested() -> str | None:
    """The signal that stopped the sweep (None: it runs on)."""
    return _requested[0] if _requested else None


def reset() -> None:
    """Forget a stop (a new sweep in the same process: tests)."""
    _requested.clear()


class OneJobAtATime:
    """A launcher that runs its jobs one by one (Hydra's basic launcher), wrapped so that no
    job starts once a stop was asked for; every other attribute is the launcher's."""

    def __init__(self, launcher: Any, remaining: Callable[[], int], adaptive: bool) -> None:
        self._launcher = launcher
        self._remaining = remaining  # jobs of the batches the sweeper has not yet taken
        self._adaptive = adaptive

    def __getattr__(self, name: str) -> Any:
        return getattr(self._launcher, name)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        runs: list[Any] = []
        for index, overrides in enumerate(job_overrides):
            try:
                runs += self._launcher.launch([overrides], initial_job_idx=initial_job_idx + index)
            except KeyboardInterrupt:  # between jobs, outside the job's own handling
                request("SIGINT")
            if requested():
                left = len(job_overrides) - index - 1 + self._remaining()
                stop_sweep(self._launcher.config, left, self._adaptive)
        return runs


class _Terminated(Exception):
    """SIGTERM reached the sweep's own process while a launcher ran a batch of jobs."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


class BatchAtOnce:
    """A launcher that runs a batch of jobs together in processes of its own (submitit's
    local and SLURM launchers), wrapped so that Ctrl-C or SIGTERM stops the sweep: the
    jobs get SIGTERM (submitit's local controller passes it to its task), the sweep waits
    for them to record themselves as interrupted, then says what it kept and exits."""

    def __init__(self, launcher: Any, remaining: Callable[[], int], adaptive: bool) -> None:
        self._launcher = launcher
        self._remaining = remaining
        self._adaptive = adaptive

    def __getattr__(self, name: str) -> Any:
        return getattr(self._launcher, name)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Any:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return self._launcher.launch(job_overrides, initial_job_idx=initial_job_idx)
        except (KeyboardInterrupt, _Terminated) as stop:
            request("SIGINT" if isinstance(stop, KeyboardInterrupt) else "SIGTERM")
            _stop_children()
            stop_sweep(self._launcher.config, self._remaining(), self._adaptive)
        finally:
            if not requested():
                signal.signal(signal.SIGTERM, previous)
        return []  # not reached: stop_sweep exits


def _stop_children(within_s: float = JOBS_END_WITHIN_S) -> None:
    """SIGTERM to this process's children (a terminal's Ctrl-C reached them already; kill
    -INT of this process alone did not), then wait for them to end, with a bound."""
    started = children(os.getpid())
    for pid in started:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + within_s
    while (left := [pid for pid in started if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    if left:
        log.warning("jobs still running %.0f s after the stop: %s", within_s, left)


def stop_sweep(config: Any, never_ran: int, adaptive: bool) -> None:
    """Write and print the summary of what completed, what the stopped sweep kept and how
    to finish it; exit 128 + the signal."""
    name = requested() or "SIGINT"
    sweep_dir = Path(str(config.hydra.sweep.dir))
    jobs = load_sweep(sweep_dir)
    kept = [j for j in jobs if j.get("status") == "completed"]
    interrupted = [Path(j["job_dir"]).name for j in jobs if j.get("status") == "interrupted"]
    failed = len(jobs) - len(kept) - len(interrupted)
    summary = f"{sweep_dir / SUMMARY_MD}"
    try:
        text = write_summary(sweep_dir, **own_summary_settings(sweep_dir)) if jobs else None
    except SummaryNotWritten as error:
        text, summary = error.text, f"printed above, not written ({error.reason})"
    if text:
        print("\n" + text)
    again = resume_command(config)
    print(
        f"sweep stopped by {name}: {len(kept)} job(s) completed and kept"
        + (f", {failed} failed" if failed else "")
        + (f", interrupted: {', '.join(interrupted)}" if interrupted else "")
        + f"; {never_ran} never ran"
        + (" (nor the rounds the adaptive design had yet to run)" if adaptive else "")
        + f". Summary of what completed: {summary}. Finish it with: {again}",
        flush=True,
    )
    raise SystemExit(128 + signal.Signals[name].value)
