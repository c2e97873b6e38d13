"""A sweep as data: every job's result.json, grouped into configurations and their runs.

Jobs that differ only in ``seed`` or in ``round`` (the rounds of an interleaved sweep's
``repeats``) are runs of one configuration; a job's own ``repeats`` are runs too. A run is
one fresh world of processes: the unit a confidence interval is computed over.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linkbench.analysis.outliers import FALSE_FLAGS, flagged
from linkbench.analysis.stats import Mean, mean_interval
from linkbench.files import RESULT_FILE
from linkbench.metrics import is_geometric
from linkbench.result import JobResult, headline, read_result

# Keys whose values make runs of one configuration, not configurations of their own.
REPEAT_KEYS = ("seed", "round")


@dataclass(frozen=True)
class Run:
    """One run's metrics, and the sweep round it ran in (None outside interleaved rounds)."""

    metrics: dict[str, Any]
    round: int | None
    job: str | None = None
    """The job's directory name in its sweep."""
    seed: int | None = None


def witnessed(job: JobResult) -> bool:
    """False where the job's transport check contradicts its arm (``verified`` false)."""
    return (job.get("transport") or {}).get("verified") is not False


@dataclass
class Configuration:
    """One configuration of a sweep (its swept settings) and its jobs."""

    settings: tuple[tuple[str, Any], ...]
    jobs: list[JobResult] = field(default_factory=list)

    @property
    def values_by_key(self) -> dict[str, Any]:
        return dict(self.settings)

    def headline(self) -> tuple[str, str]:
        """(metric, unit) of this configuration's task."""
        return headline(self.jobs[0])

    def label(self, skip: str | None = None) -> str:
        shown = [f"{k}={v}" for k, v in self.settings if k != skip]
        return ", ".join(shown) or "(one configuration)"

    def runs(self) -> list[Run]:
        """Every run of every completed job whose transport check did not contradict its arm
        (:meth:`unwitnessed`)."""
        out = []
        for job in self.jobs:
            if job.get("status") == "completed" and witnessed(job):
                for metrics in job.get("repeat_metrics") or [job["metrics"]]:
                    out.append(Run(metrics, job.get("round"), job.get("job"), job.get("seed")))
        return out

    def values(self, key: str) -> list[float]:
        return [r.metrics[key] for r in self.runs() if isinstance(r.metrics.get(key), (int, float))]

    def paired(self, key: str) -> dict[tuple[int | None, int | None], float]:
        """(round, seed) -> value, for runs another configuration can pair with its own: one
        run per round of interleaved rounds, or one per seed of a sweep over seeds (both arms
        of a comparison then start from the same weights and data order)."""
        runs = [r for r in self.runs() if isinstance(r.metrics.get(key), (int, float))]
        seeds = {r.seed for r in runs}
        by_seed = len(seeds) == len(runs) > 1
        return {(r.round, r.seed): r.metrics[key] for r in runs if r.round is not None or by_seed}

    def outliers(self, key: str, false_flags: float = FALSE_FLAGS) -> list[Run]:
        """Runs far from the configuration's others on the log scale (:mod:`.outliers`), a
        clean configuration flagged in at most ``false_flags`` of sweeps."""
        runs = [r for r in self.runs() if isinstance(r.metrics.get(key), (int, float))]
        return [runs[i] for i in flagged([r.metrics[key] for r in runs], false_flags)]

    def mean(self, key: str) -> Mean | None:
        """The mean over runs: geometric for rates and times, arithmetic for the rest."""
        values = self.values(key)
        return mean_interval(values, geometric=is_geometric(key)) if values else None

    def trace_means(self) -> dict[str, float] | None:
        """The profiled steps' breakdown (:mod:`linkbench.analysis.trace`): the mean over the
        traced jobs of their means over ranks; None when no job was traced."""
        traced = [j["trace"]["mean"] for j in self.jobs if j.get("trace")]
        if not traced:
            return None
        keys = [k for k, v in traced[0].items() if isinstance(v, float)]
        return {
            k: statistics.fmean(t[k] for t in traced if isinstance(t.get(k), float)) for k in keys
        }

    def lost(self) -> list[str]:
        """The jobs of this configuration that did not complete (failed or interrupted): runs
        its comparisons lack."""
        return [str(j.get("job")) for j in self.jobs if j.get("status") != "completed"]

    def unwitnessed(self) -> list[tuple[str, str]]:
        """(job, why) for each completed job whose transport check contradicts its arm (an
        emulated link that did not shape its traffic, NCCL off the arm's path): it did not
        measure what its configuration says, so no figure or verdict counts it."""
        return [
            (str(j.get("job")), str(j["transport"].get("reason")))
            for j in self.jobs
            if j.get("status") == "completed" and not witnessed(j)
        ]

    @property
    def status(self) -> str:
        states = {str(job.get("status")) for job in self.jobs}
        return states.pop() if len(states) == 1 else "partial"

    def learnable(self) -> bool:
        """Whether its data's labels can be learnt, so its held-out accuracy means something
        (result.json's ``data_learnable``; a file written before it: any data but the
        synthetic, whose labels are random)."""
        recorded = self.first("data_learnable")
        return bool(recorded) if recorded is not None else self.first("data") != "synthetic"

    def first(self, key: str) -> Any:
        """A job-level field (transport, backend...) of the first completed job, or any."""
        done = [j for j in self.jobs if j.get("status") == "completed"] or self.jobs
        return done[0].get(key)


def read_sweep(sweep_dir: Path) -> tuple[list[JobResult], list[str]]:
    """Every readable job's result.json under the sweep directory, in path order, and the
    names of the jobs whose result.json cannot be read (cut short, or not a JSON object),
    which the summary names; a task's own metrics (``metric_table``) join this process's
    table as each is read, before anything is averaged. A result.json of a layout this
    linkbench does not know is refused (:class:`~linkbench.result.UnknownLayout`, one
    sentence), not misread."""
    results, unreadable = [], []
    for path in sorted(sweep_dir.glob(f"*/{RESULT_FILE}")):
        if (result := read_result(path.parent)) is not None:
            results.append(result)
        else:
            unreadable.append(path.parent.name)
    return results, unreadable


def load_sweep(sweep_dir: Path) -> list[JobResult]:
    """Every readable job's result.json under the sweep directory (:func:`read_sweep`)."""
    return read_sweep(sweep_dir)[0]


def timed_training_s(results: list[JobResult]) -> float:
    """Seconds of timed training steps in every run of every job."""
    total = 0.0
    for result in results:
        metrics = result.get("metrics") or {}
        for run in result.get("repeat_metrics") or [metrics]:
            total += run.get("timed_steps", 0) * run.get("step_time_ms", 0.0) / 1e3
    return total


def job_settings(result: JobResult) -> dict[str, Any]:
    """What a job's overrides set, as its record keeps it (``settings``, parsed by Hydra's
    parser when the job ran: :func:`linkbench.config.overrides.settings`)."""
    return dict(result.get("settings", {}))


def swept_keys(results: list[JobResult]) -> list[str]:
    """Override keys whose values differ between the jobs, in first-seen order."""
    seen: dict[str, set] = {}
    for result in results:
        for key, value in job_settings(result).items():
            seen.setdefault(key, set()).add(str(value))
    return [k for k, values in seen.items() if len(values) > 1]


def _order(settings: tuple[tuple[str, Any], ...]) -> tuple:
    """Sort key: numbers by value, everything else by text."""
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for _, v in settings)


def group(results: list[JobResult], keys: list[str]) -> list[Configuration]:
    """Jobs grouped into configurations, in the order of their swept values."""
    configs: dict[tuple, Configuration] = {}
    settings_keys = [k for k in keys if k not in REPEAT_KEYS]
    for result in results:
        values = job_settings(result)
        settings = tuple((k, values.get(k)) for k in settings_keys)
        configs.setdefault(settings, Configuration(settings)).jobs.append(result)
    return sorted(configs.values(), key=lambda c: _order(c.settings))
