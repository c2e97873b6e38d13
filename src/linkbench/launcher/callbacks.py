"""Hydra callbacks: an output-directory check before any job, and the sweep's summary.

:class:`OutputDirCheck` refuses an output directory that cannot be made or written in one
sentence, before Hydra itself would fail on it with a traceback.

The summary is rebuilt from the jobs' result.json files after each round (or a job a minute
after the last summary), so it exists even when a job failed (Hydra then skips
``on_multirun_end``) and a remote launcher's jobs are covered by ``python -m
linkbench.report``. It is printed after the sweep's last job, counted
from the sweep's overrides the way Hydra's basic sweeper expands them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from linkbench.analysis.compare import FAMILIES
from linkbench.analysis.phases import sweep_line
from linkbench.analysis.report import DEFAULT_TOLERANCE, SummaryNotWritten, write_summary
from linkbench.analysis.stats import DEFAULT_MARGIN
from linkbench.analysis.sweep import load_sweep, read_sweep, timed_training_s
from linkbench.config.overrides import key, override_texts, parse
from linkbench.errors import ConfigError, refuse
from linkbench.files import ROUNDS_FILE, SUMMARY_MD, read_json
from linkbench.launcher.sweeper import check_summary, sweep_rounds
from linkbench.result import JobResult

log = logging.getLogger("linkbench")
SUMMARY_EVERY_S = 60.0  # the summary is written after a round, or a job this long after it


def sweep_dimensions(hydra_node: DictConfig) -> dict[str, int] | None:
    """key -> number of values, for every key a multirun's overrides and sweeper params sweep
    (as the basic sweeper expands them); None when that cannot be worked out."""
    try:
        params = hydra_node.sweeper.get("params") or {}
        arguments = [f"{k}={v}" for k, v in params.items()] + override_texts(
            hydra_node.overrides.task
        )
        parsed = parse(arguments)
        by_key = {key(o): o for o in parsed}
        return {
            name: len(list(o.sweep_string_iterator()))
            for name, o in by_key.items()
            if o.is_sweep_override()
        }
    except Exception:  # another sweeper, or syntax the basic sweeper alone understands
        return None


def adaptive_jobs(config: DictConfig) -> tuple[int, int] | None:
    """The fewest and the most jobs an adaptive sweep may run (every configuration
    ``min_rounds`` times, and at most ``max_rounds``); None when the sweep is not adaptive
    or its size is unknown."""
    dimensions = sweep_dimensions(config.hydra)
    sweeper = config.hydra.get("sweeper") or {}
    if dimensions is None or sweep_rounds(config) is not None or "min_rounds" not in sweeper:
        return None
    configurations = math.prod(dimensions.values())
    return configurations * int(sweeper["min_rounds"]), configurations * int(sweeper["max_rounds"])


def expected_jobs(config: DictConfig) -> int | None:
    """How many jobs linkbench's sweeper makes of this multirun (None if unknown, as for
    adaptive rounds, which decide after each round)."""
    dimensions = sweep_dimensions(config.hydra)
    rounds = sweep_rounds(config)
    if dimensions is None or rounds is None:
        return None
    return math.prod(dimensions.values()) * rounds


def round_ended(
    round_: int | None, results: list[JobResult], sweep_dir: Path, per_round: int | None
) -> bool:
    """Whether every job of round ``round_`` has a record: ``per_round`` jobs of a fixed
    round, or as many as an adaptive round started (its rounds.json)."""
    if round_ is None:
        return False
    if per_round is None:
        rounds = (read_json(sweep_dir / ROUNDS_FILE) or {}).get("rounds") or []
        if round_ >= len(rounds):
            return False
        per_round = int(rounds[round_].get("jobs") or 0)
    return sum(r.get("round") == round_ for r in results) >= per_round


class SweepSummary(Callback):
    """Registered in conf/config.yaml under hydra.callbacks."""

    def __init__(
        self,
        axis: str | None = None,
        baseline: Any = None,
        margin: float = DEFAULT_MARGIN,
        accuracy_tolerance: float = DEFAULT_TOLERANCE,
        family: str = FAMILIES[0],
    ) -> None:
        check_summary({"margin": margin, "accuracy_tolerance": accuracy_tolerance,
                       "family": family})  # fmt: skip
        self.axis, self.baseline, self.margin, self.family = axis, baseline, margin, family
        self.tolerance = accuracy_tolerance
        self.expected: int | None = None
        self.per_round: int | None = None  # jobs a fixed round runs (adaptive: rounds.json)
        self.finished = 0
        self.printed = False
        self.started = time.monotonic()
        self.written_at = self.started  # the summary's last write
        self.adaptive: tuple[int, int] | None = None
        self.not_written: str | None = None  # why the summary was not written (a full disk)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self.expected = expected_jobs(config)
        rounds = sweep_rounds(config)
        self.per_round = self.expected // rounds if self.expected and rounds else None
        self.adaptive = adaptive_jobs(config) if self.expected is None else None
        self.finished = 0
        self.printed = False
        self.started = self.written_at = time.monotonic()

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        """``job k/N`` with the time so far and an estimate of what is left."""
        if config.hydra.mode != RunMode.MULTIRUN or os.environ.get("RANK", "0") != "0":
            return
        elapsed = time.monotonic() - self.started
        total = "" if self.expected is None else f"/{self.expected}"
        left = ""
        per_job = elapsed / self.finished if self.finished else None
        if per_job is not None and self.expected is not None:
            left = f", about {per_job * (self.expected - self.finished):.0f} s left"
        elif self.expected is None and config.get("round") is not None:
            left = f", adaptive round {config.round + 1}"
            if per_job is not None and self.adaptive is not None:
                fewest, most = (max(0, n - self.finished) * per_job for n in self.adaptive)
                if round(fewest) < round(most):
                    left += f": {fewest:.0f} to {most:.0f} s left, as the rounds decide"
                elif most >= 1:
                    left += f": about {most:.0f} s left"
        overrides = " ".join(override_texts(config.hydra.overrides.task))
        log.info("job %d%s (%.0f s elapsed%s): %s", self.finished + 1, total, elapsed, left,
                 overrides)  # fmt: skip

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        if config.hydra.mode != RunMode.MULTIRUN or os.environ.get("RANK", "0") != "0":
            return  # one writer: the launching process, or global rank 0 under SLURM tasks
        self.finished += 1
        last = self.expected is not None and self.finished >= self.expected
        sweep_dir = Path(config.hydra.sweep.dir)
        read = read_sweep(sweep_dir)
        ended = round_ended(config.get("round"), read[0], sweep_dir, self.per_round)
        # The summary (and TensorBoard's) once a round, or a minute: a sweep's answer changes
        # with a round; every job is recorded in its result.json meanwhile.
        if not (last or ended or time.monotonic() - self.written_at >= SUMMARY_EVERY_S):
            return
        text = self._write(sweep_dir, plots=last or ended, read=read)
        if text and last:
            self._print(sweep_dir, text)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        if not self.printed:
            sweep_dir = Path(config.hydra.sweep.dir)
            if text := self._write(sweep_dir):
                self._print(sweep_dir, text)

    def _write(
        self,
        sweep_dir: Path,
        plots: bool = True,
        read: tuple[list[JobResult], list[str]] | None = None,
    ) -> str | None:
        """The summary's text, written beside the jobs where it fits (a full disk: the
        text alone, for the console, and why it was not written)."""
        try:
            text = write_summary(
                sweep_dir, self.axis, self.baseline, self.margin, self.tolerance, plots,
                self.family, read=read,
            )  # fmt: skip
        except SummaryNotWritten as error:
            self.not_written = error.reason
            return error.text
        self.not_written = None
        self.written_at = time.monotonic()
        return text

    def _print(self, sweep_dir: Path, text: str) -> None:
        self.printed = True
        wall = time.monotonic() - self.started
        results = load_sweep(sweep_dir)
        timed = timed_training_s(results)
        where = f"summary: {sweep_dir / SUMMARY_MD}, summary.csv and plots beside it"
        if self.not_written:
            where = f"the summary could not be written into {sweep_dir}: {self.not_written}"
        print(
            f"\n{text}\n({where})\n"
            f"sweep wall time {wall:.1f} s, of which {timed:.1f} s timed training steps "
            f"({timed / wall:.0%}); where it went, {sweep_line(results, wall)}"
        )


def unwritable_reason(directory: Path) -> str | None:
    """Why ``directory`` cannot be created or written, or None when it can."""
    if problem := _name_problem(directory):
        return problem
    existing = directory
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    made = [directory, *directory.parents]
    made = [d for d in made if not d.exists()]  # what this check makes, and takes away again
    try:  # permissions do not tell everything (/proc, a full or read-only file system)
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        return f"it cannot be created ({error.strerror or error})"
    for made_here in made:  # deepest first: a refused run leaves no empty folder behind
        with contextlib.suppress(OSError):
            made_here.rmdir()
    return None


NAME_MAX, PATH_MAX = 255, 4096  # Linux's limits in bytes (limits.h), where pathconf says none


def _name_problem(directory: Path) -> str | None:
    """A part of ``directory`` longer than a name may be, or a path longer than the system
    takes (each in bytes), said as such; None where every length is within its limit."""
    nearest = next((p for p in directory.parents if _exists(p)), Path("/"))
    try:
        name_max = os.pathconf(nearest, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = NAME_MAX
    for part in directory.parts:
        if len(part.encode()) > name_max:
            return (
                f"its folder name {part[:24]}... is {len(part.encode())} bytes, more than the "
                f"{name_max} a name may have on this file system"
            )
    if len(str(directory).encode()) >= PATH_MAX:
        return f"its path is {len(str(directory).encode())} bytes, more than {PATH_MAX - 1}"
    return None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a part too long, a loop: not a place to ask
        return False


class OutputDirCheck(Callback):
    """Registered in conf/config.yaml; checks hydra.run.dir or hydra.sweep.dir up front."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check("hydra.run.dir", config.hydra.run.dir)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check("hydra.sweep.dir", config.hydra.sweep.dir)

    def _check(self, key: str, directory: str) -> None:
        reason = unwritable_reason(Path(directory).expanduser().absolute())
        if reason:
            # Hydra turns a callback's exceptions into warnings; this must stop the run.
            refuse(
                ConfigError(
                    f"{key}={directory} cannot hold the outputs: {reason}; choose another {key}."
                )
            )
