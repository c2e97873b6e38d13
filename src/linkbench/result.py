"""result.json, one job's record, as a type. :class:`JobResult` names every field the house
writes and reads, with its type, so a reader misspelling a field fails ``make lint`` (mypy)
rather than read None; :func:`read_result` is the one way a file becomes one, refusing a
layout this linkbench does not know (:class:`UnknownLayout`, one sentence) rather than
misreading it. docs/results.md says what each field means.

The record stays a JSON object (a ``TypedDict``, a plain dict at run time): a task may add
fields of its own (``Task.finish``), which this type does not name and readers outside the
task never read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal, TypedDict

from linkbench.files import RESULT_FILE, read_json
from linkbench.metrics import register, unit

RESULT_SCHEMA_VERSION = 1
"""The layout of result.json this linkbench writes (its ``schema_version``). A file without
one was written before layouts were numbered, in layout 1, and is read as one. A reader
refuses a layout it does not know (:func:`result_version_problem`) rather than misread it;
a new layout that renames or reshapes a field raises this number, and its readers read the
older ones or refuse them in one sentence."""

# The built-in tasks' headlines, for result.json files written before each recorded its own
# (``headline``; the task's class says it: linkbench.worker.task).
RECORDED_BEFORE_HEADLINES = {
    "train": "samples_per_sec",
    "allreduce": "busbw_gb_s_peak",
    "links": "host_to_device_gb_s",
}

Status = Literal["completed", "failed", "interrupted"]


class JobResult(TypedDict, total=False):
    """One job's result.json. Every field may be missing: a job that failed before it was
    planned has only the first few, and a file of an older linkbench lacks later ones."""

    schema_version: int
    status: Status
    error: str
    """Why it failed or was stopped, one sentence."""
    failed_rank: int
    overrides: list[str]
    settings: dict[str, Any]
    """What the overrides set, as Hydra parses them (the summary groups jobs by them)."""
    job_dir: str
    job: str
    """The job directory's name: set by :func:`read_result`, never written."""
    started_at: str
    ended_at: str
    duration_s: float
    phases_s: dict[str, float]
    # The plan (linkbench.launcher.record.describe_plan).
    task: str
    headline: str
    """The metric the sweep judges the task by."""
    metric_table: list[dict[str, Any]]
    """The task's own metrics' table entries (linkbench.metrics.Metric as a dict)."""
    world_size: int
    layout: dict[str, Any]
    nnodes: int
    backend: str
    device_type: str
    interconnect: str
    expected_transport: str
    env: dict[str, str]
    env_replaced: dict[str, Any]
    env_inherited_nccl: dict[str, str]
    worker_nccl_env: dict[str, str]
    precision: str
    execution: str
    """How the step ran: eager, compile or cuda_graphs."""
    model: str
    optimizer: str
    strategy: str
    data: str
    data_learnable: bool
    """Whether the data's labels can be learnt (the summary judges accuracy only then)."""
    batch: int
    global_batch: int
    scaling: str
    lr: float
    steps: int
    epochs: float | None
    samples: int | None
    steps_per_epoch: int | None
    samples_seen: int
    untimed_steps: int | None
    seed: int
    repeats: int | str
    cudnn_benchmark: bool
    round: int | None
    notes: list[str]
    auto: dict[str, str]
    resumed_from_step: int
    # What the runs measured (linkbench.launcher.record.compose).
    metrics: dict[str, Any]
    """Each metric's median over the runs (linkbench.metrics names them)."""
    repeat_metrics: list[dict[str, Any]]
    """Every run's metrics, where there was more than one."""
    first_step_done_at: float
    time_to_first_step_s: float
    warnings: list[str]
    transport: dict[str, Any]
    nccl_tuning: dict[str, Any]
    hw: dict[str, Any]
    conditions: list[dict[str, Any]]
    trace: dict[str, Any]
    link: dict[str, Any]
    health: dict[str, Any]
    """task=allreduce: whether the bus bandwidths look healthy."""
    collectives: list[dict[str, Any]]
    """task=allreduce: one row per collective and size (``op``, ``bytes``, ``busbw_gb_s``...)."""
    links: dict[str, Any]
    """task=links: every copy's row, the matrices of bandwidths between devices, notes."""


class UnknownLayout(ValueError):
    """A job's result.json is of a layout this linkbench cannot read; the message says which
    and what to do."""


def result_version_problem(result: dict[str, Any], path: str | os.PathLike) -> str | None:
    """Why this linkbench cannot read the result.json at ``path`` (one sentence naming the
    fix), or None when it can."""
    version = result.get("schema_version", 1)
    if isinstance(version, int) and 1 <= version <= RESULT_SCHEMA_VERSION:
        return None
    return (
        f"{path} has result layout {version!r}, and this linkbench reads layouts 1 to "
        f"{RESULT_SCHEMA_VERSION}: read it with the linkbench that wrote it (its manifest.json "
        "names the commit), or upgrade this one."
    )


def read_result(job_dir: Path) -> JobResult | None:
    """The job's result.json, its ``job`` set to the directory's name and its task's own
    metrics (``metric_table``) added to this process's table, the one place a reader's table
    grows (a planner's or worker's grows as it defines the task's class:
    linkbench.worker.task.Task); None where the
    file is missing or not a JSON object (cut short). Raises :class:`UnknownLayout` for a
    layout this linkbench does not know."""
    path = job_dir / RESULT_FILE
    found = read_json(path)
    if not isinstance(found, dict):
        return None
    if (problem := result_version_problem(found, path)) is not None:
        raise UnknownLayout(problem)
    result: JobResult = found  # type: ignore[assignment]  # checked: a known layout
    result["job"] = job_dir.name
    register(result.get("metric_table", ()))
    return result


def headline(result: JobResult) -> tuple[str, str]:
    """(metric, unit) of the headline of a job's result.json (a task's own metric's unit is
    known once :func:`read_result` read one of its results)."""
    name = result.get("headline") or RECORDED_BEFORE_HEADLINES.get(
        result.get("task", "train"), "samples_per_sec"
    )
    return name, unit(name)
