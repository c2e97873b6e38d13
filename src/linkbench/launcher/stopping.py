"""A sweep its user can stop: the first Ctrl-C or SIGTERM ends the sweep, not only a job.

The signal reaches the running job's workers and launcher as before: the workers stop, the
job's ``result.json`` says ``interrupted`` and keeps what was measured. :func:`request`
(called by the job) then marks the sweep as stopping and gives SIGINT and SIGTERM back
their default action, so a second one ends the process at once, losing nothing already on
disk. The sweeper (:class:`OneJobAtATime`) starts no further job; it prints the summary of
what completed, which jobs were kept, which was interrupted and how many never ran, how
to finish the sweep (``resume=true`` into the same directory), and exits with 128 + the
signal's number.
"""

from __future__ import annotations

import logging
import shlex
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from linkbench.analysis.sweep import load_sweep
from linkbench.files import SUMMARY_MD

log = logging.getLogger("linkbench")

_requested: list[str] = []  # the signal's name, once a stop was asked for


def request(signal_name: str) -> None:
    """Stop the sweep after the job in progress; a second signal now ends the process."""
    if not _requested:
        _requested.append(signal_name)
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


def stop_sweep(config: Any, never_ran: int, adaptive: bool) -> None:
    """Print what the stopped sweep kept and how to finish it; exit 128 + the signal."""
    name = requested() or "SIGINT"
    sweep_dir = Path(str(config.hydra.sweep.dir))
    jobs = load_sweep(sweep_dir)
    kept = [j for j in jobs if j.get("status") == "completed"]
    interrupted = [Path(j["job_dir"]).name for j in jobs if j.get("status") == "interrupted"]
    failed = len(jobs) - len(kept) - len(interrupted)
    summary = sweep_dir / SUMMARY_MD
    if summary.is_file():
        print("\n" + summary.read_text())
    arguments = [a for a in config.hydra.overrides.task if not a.startswith("resume=")]
    again = shlex.join(
        ["python", "run.py", "-m", *arguments, f"hydra.sweep.dir={sweep_dir}", "resume=true"]
    )
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
