"""One job's record: what the job left, composed into result.json's fields, and the writers
of its files.

A :class:`JobRecord` starts ``failed`` (so a crash of the launcher itself leaves an honest
file), learns the plan, collects each run's metrics and transport check, and ends in one of
three ways: :meth:`~JobRecord.complete`, :meth:`~JobRecord.fail` or
:meth:`~JobRecord.interrupt`. :meth:`~JobRecord.write` then reads what the workers left
(:class:`JobOutputs`), composes the fields with a function that reads and writes nothing
(:func:`compose`: medians, the transport verdict, NCCL's tuning, the hardware's witness,
the traces, the task's own additions), and hands them to the writers: result.json, the
manifest (:func:`write_manifest`) and the job's TensorBoard summary
(:func:`linkbench.launcher.hparams.write_job_summary`), keeping whatever a run measured
before it ended.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from linkbench.analysis.phases import add, durations
from linkbench.analysis.trace import analyse as analyse_traces
from linkbench.analysis.trace import with_untraced
from linkbench.config.overrides import JobOverrides
from linkbench.config.plan import JobPlan, RunPlan
from linkbench.files import (
    HARDWARE_FILE,
    MANIFEST_FILE,
    METRICS_FILE,
    RESULT_FILE,
    read_json,
    write_json,
)
from linkbench.launcher.hparams import write_job_summary
from linkbench.launcher.provenance import git_state
from linkbench.link.nccl_log import requested_vs_used
from linkbench.link.topology import versions
from linkbench.link.transport import hardware_witness
from linkbench.metrics import exposed_note, recorded
from linkbench.result import RESULT_SCHEMA_VERSION, JobResult


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def describe_plan(plan: JobPlan) -> JobResult:
    """The plan's facts as result.json records them (a task's own metrics' table entries
    too, for the analysis)."""
    c = plan.config
    task = plan.task_spec
    described: JobResult = {
        "task": str(c.task.name),
        "headline": task.headline,
        "world_size": plan.world_size,
        "layout": plan.layout.describe(),
        "nnodes": plan.nnodes,
        "backend": plan.backend,
        "device_type": plan.device_type,
        "interconnect": str(c.interconnect.name),
        "expected_transport": str(c.interconnect.expected_transport),
        "env": plan.env.applied,
        "env_replaced": plan.env.replaced,
        "env_inherited_nccl": plan.env.inherited_nccl,
        "precision": str(plan.precision),
        "execution": "compile" if c.compile else "cuda_graphs" if c.cuda_graphs else "eager",
        "model": c.model.name,
        "optimizer": c.optimizer.name,
        "strategy": str(c.strategy.name),
        "data": str(c.data.name),
        "data_learnable": c.data.learnable,
        "batch": c.batch,
        "global_batch": plan.global_batch,
        "scaling": str(c.scaling.rule),
        "lr": plan.lr,
        "steps": plan.steps,
        "epochs": c.epochs,
        "samples": c.samples,
        "steps_per_epoch": plan.steps_per_epoch,
        "samples_seen": plan.steps * plan.global_batch,
        "untimed_steps": c.untimed_steps,
        "seed": c.seed,
        "repeats": c.repeats,
        "cudnn_benchmark": plan.cudnn_benchmark,
        "round": c.round,
        "notes": plan.notes,
    }
    if task.metrics:
        described["metric_table"] = recorded(task.metrics)
    return described


def nccl_tuning(summary: dict[str, Any] | None, requested: dict[str, str]) -> dict[str, Any]:
    """The algorithms and protocols NCCL's TUNING log says it ran, and the requests (the
    nccl group's variables) it did not honour."""
    if not summary:
        return {"available": False, "reason": "no NCCL log (backend=gloo, or no NCCL lines)"}
    tuning = summary.get("tuning") or {}
    if not tuning.get("calls"):
        return {"available": False, "reason": "no TUNING lines (NCCL prints them on rank 0 "
                "of communicators of two or more ranks, NCCL 2.20 and newer)"}  # fmt: skip
    return {"available": True, **tuning, "ignored": requested_vs_used(summary, requested)}


def combine_transports(checks: list[dict[str, Any]]) -> dict[str, Any]:
    """One verdict for all repeats: false if any repeat contradicts the arm."""
    for verdict in (False, None):
        for check in checks:
            if check["verified"] is verdict:
                return {**check, "repeats_checked": len(checks)}
    return {**checks[0], "repeats_checked": len(checks)}


def median_metrics(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each numeric metric's median over the runs (other values from the first run). The
    exposed communication's fraction and note are those of the medians: the fraction is the
    median exposed time over the median synced step (a median of ratios can differ from it in
    sign), and a median the probe could not measure is marked even where the first run's
    figure stood, one that stands not for the first run's noise."""
    if len(runs) == 1:
        return dict(runs[0])
    merged = dict(runs[0])
    for key, value in merged.items():
        values = [m.get(key) for m in runs]
        numbers = [v for v in values if isinstance(v, (int, float))]
        if isinstance(value, (int, float)) and len(numbers) == len(values):
            merged[key] = statistics.median(numbers)
    if merged.get("synced_step_ms") and "comm_exposed_ms" in merged:
        merged["comm_fraction"] = merged["comm_exposed_ms"] / merged["synced_step_ms"]
    merged.pop("comm_exposed_note", None)
    if note := exposed_note(merged):
        merged["comm_exposed_note"] = note
    return merged


class JobRecord:
    """result.json of one job, from its start to its end."""

    def __init__(self, job_dir: Path, overrides: JobOverrides, in_sweep: bool = False) -> None:
        self.job_dir = job_dir
        self.in_sweep = in_sweep  # a sweep's rows are its configurations, not its jobs
        self.plan: JobPlan | None = None
        self.runs: list[dict[str, Any]] = []
        self.transports: list[dict[str, Any]] = []
        self.fields: JobResult = {
            "schema_version": RESULT_SCHEMA_VERSION,
            "status": "failed",
            "overrides": list(overrides.texts),
            "settings": overrides.settings,
            "job_dir": str(job_dir),
            "started_at": now_iso(),
        }
        self._started = time.monotonic()
        self._started_s = time.time()  # the HParams session's start
        self.phases: dict[str, float] = {}  # seconds per phase (linkbench.analysis.phases)
        self._unclaimed_since = self._started_s  # the wall time no phase has claimed yet
        self._running = False

    def launching(self) -> None:
        """The ranks of a run start now: what came before is planning (or, between runs,
        the record of the last)."""
        self._claim("record" if self.runs else "planning")
        self._running = True

    def returned(
        self, marks: list[tuple[str, float]], launched_at: float, returned_at: float
    ) -> None:
        """The run's ranks ended at ``returned_at``: its phases, from rank 0's marks, then
        the teardown."""
        add(self.phases, durations([*marks, ("teardown", returned_at)], launched_at))
        self._unclaimed_since = returned_at
        self._running = False

    def _claim(self, phase: str) -> None:
        now = time.time()
        self.phases[phase] = self.phases.get(phase, 0.0) + max(0.0, now - self._unclaimed_since)
        self._unclaimed_since = now

    def planned(self, plan: JobPlan) -> None:
        self.plan = plan
        self.fields.update(describe_plan(plan))
        if plan.resume_step is not None:
            self.fields["resumed_from_step"] = plan.resume_step

    def current_run(self) -> RunPlan:
        """The plan of the run in progress (the next one to add)."""
        assert self.plan is not None
        return self.plan.run(len(self.runs))

    def add_run(self, metrics: dict[str, Any], returned: dict[str, Any]) -> None:
        """A finished run's metrics and the other values rank 0 returned (fields of
        result.json: the task's ``run`` says which)."""
        self.runs.append(metrics)
        self.fields.update(cast(JobResult, returned))

    def add_conditions(self, conditions: dict[str, Any]) -> None:
        """What the machine was doing at a run's start and end (``conditions``: one entry per
        run, :mod:`linkbench.launcher.conditions`)."""
        self.fields.setdefault("conditions", []).append(conditions)

    def add_transport(self, check: dict[str, Any]) -> None:
        self.transports.append(check)

    def complete(self) -> None:
        self.fields["status"] = "completed"

    def fail(self, error: str, failed_rank: int | None = None) -> None:
        self.fields["status"] = "failed"
        self.fields["error"] = error
        if failed_rank is not None:
            self.fields["failed_rank"] = failed_rank

    def interrupt(self, error: str) -> None:
        self.fields["status"] = "interrupted"
        self.fields["error"] = error

    @property
    def completed(self) -> bool:
        return self.fields["status"] == "completed"

    def write(self) -> JobResult:
        """Compose result.json's fields from what the job left (:func:`compose`) and write
        result.json, and once planned the manifest and the TensorBoard summary."""
        outputs = self.outputs()
        composed = compose(outputs, self.plan)
        composed["ended_at"] = now_iso()
        self.fields = composed
        if self.plan is not None:
            write_manifest(self.job_dir, self.plan, composed, outputs.hardware)
            write_job_summary(self.plan, composed, outputs.runs, self.completed, self._started_s,
                              self.in_sweep)  # fmt: skip
        # A run that did not return (failed, stopped) claims its time as one phase.
        self._claim("unfinished run" if self._running else "record")
        composed["phases_s"] = {name: round(s, 3) for name, s in self.phases.items()}
        composed["duration_s"] = round(time.monotonic() - self._started, 3)
        write_json(self.job_dir / RESULT_FILE, composed)
        return composed

    def outputs(self) -> JobOutputs:
        """What the job's runs left: the metrics collected, those of a run that did not
        complete (rank 0 writes metrics.json as it goes), the workers' hardware.json and the
        traces, read once the job ended."""
        runs = list(self.runs)
        if not self.completed and (partial := read_json(self.job_dir / METRICS_FILE)):
            runs.append(partial["metrics"])
        planned = self.plan is not None
        return JobOutputs(
            fields=self.fields.copy(),
            runs=runs,
            transports=list(self.transports),
            hardware=(read_json(self.job_dir / HARDWARE_FILE) or {}) if planned else {},
            trace=analyse_traces(self.job_dir) if planned else None,
        )


@dataclass(frozen=True)
class JobOutputs:
    """Everything a job left for its record: the fields it collected (status, the plan's
    facts, what rank 0 returned, the machine's conditions), every run's metrics, every run's
    transport check, the workers' hardware description and the analysed traces."""

    fields: JobResult
    runs: list[dict[str, Any]]
    transports: list[dict[str, Any]] = field(default_factory=list)
    hardware: dict[str, Any] = field(default_factory=dict)
    trace: dict[str, Any] | None = None


def compose(outputs: JobOutputs, plan: JobPlan | None) -> JobResult:
    """result.json's fields from a job's outputs, reading and writing nothing: the metrics
    (medians over the runs, and every run's), the hardware's warnings, one transport verdict
    with NCCL's tuning and the hardware's witness, the traces beside the untraced step time,
    and what the task adds itself (its ``finish``)."""
    fields = outputs.fields.copy()
    runs = outputs.runs
    fields["metrics"] = median_metrics(runs) if runs else {}
    if len(runs) > 1:
        fields["repeat_metrics"] = runs
    if plan is None:
        return fields
    fields["warnings"] = list(outputs.hardware.get("warnings", []))
    if outputs.transports:
        fields["transport"] = combine_transports(outputs.transports)
        fields["nccl_tuning"] = nccl_tuning(
            outputs.transports[0].get("summary"), plan.config.nccl.variables()
        )
        fields["transport"]["hardware"] = hardware_witness(
            fields.get("hw"),
            fields["metrics"].get("comm_bytes_per_step"),
            str(plan.config.interconnect.expected_transport),
            plan.world_size,
        )
    if outputs.trace is not None:
        fields["trace"] = with_untraced(outputs.trace, fields["metrics"].get("step_time_ms"))
    plan.runtime.task.finish(fields, plan, outputs.hardware)
    return fields


def write_manifest(
    job_dir: Path, plan: JobPlan, fields: JobResult, hardware: dict[str, Any]
) -> None:
    """manifest.json: the resolved config, overrides, git state, environment and hardware."""
    manifest = {
        "config": plan.resolved_config(),
        "overrides": fields["overrides"],
        "git": git_state(),
        "env": plan.env.applied,
        "link": fields.get("link"),
        "env_replaced": plan.env.replaced,
        "seed": plan.config.seed,
        **(hardware or {"versions": versions()}),
    }
    write_json(job_dir / MANIFEST_FILE, manifest)
