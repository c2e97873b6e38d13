"""A live progress bar of a job's steps when the console is a terminal.

The launching process draws it (tqdm), from the ``metrics.json`` rank 0 rewrites at every
logging step: the step, the loss and the throughput so far. Rank 0's own log lines then
stay in its log file instead of scrolling past the bar; on anything but a terminal (a file,
CI, SLURM) there is no bar and rank 0's lines are shown as they come.
"""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path
from types import TracebackType

from linkbench.config.plan import JobPlan
from linkbench.files import METRICS_FILE, read_json

POLL_S = 0.5
FALLBACK_SIZE = (100, 24)


def console_is_terminal() -> bool:
    return sys.stdout.isatty() and sys.stderr.isatty()


class ProgressBar:
    """``with ProgressBar(plan):`` around a run of the job's workers."""

    def __init__(self, plan: JobPlan, enabled: bool) -> None:
        self.enabled = enabled
        self._file = Path(plan.job_dir) / METRICS_FILE
        self._steps = plan.steps
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            self._thread = threading.Thread(
                target=self._run, name="linkbench-progress", daemon=True
            )
            self._thread.start()
        return self

    def _run(self) -> None:
        from tqdm import tqdm

        # A terminal that reports no size (a new pseudo-terminal) would get an empty bar.
        size = shutil.get_terminal_size(FALLBACK_SIZE)
        with tqdm(total=self._steps, unit="step", ncols=size.columns, nrows=size.lines) as bar:
            while True:
                stopping = self._stop.wait(POLL_S)
                found = read_json(self._file) or {}
                metrics = found.get("metrics", {})
                if "step" in found:
                    bar.update(found["step"] - bar.n)
                    shown = {"loss": f"{metrics.get('final_loss', float('nan')):.4f}"}
                    if "samples_per_sec" in metrics:
                        shown["samples/s"] = f"{metrics['samples_per_sec']:,.0f}"
                    bar.set_postfix(shown, refresh=True)
                if stopping:
                    return

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
