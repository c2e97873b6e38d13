"""TensorBoard's record of a finished job, written once by the launching process.

When a job ends, the launching process writes into the job's run (its output directory)
the final metrics (``final/*``: medians over repeats), every repeat's headline
(``repeats/*``) and a custom-scalars layout of the charts the job has data for; figures
that do not stand as data (a probe's figure below its noise, a negative time:
:func:`linkbench.metrics.honest`) are left out. A lone job is also its own HParams session,
with its settings (as text, ``8`` not ``8.0000``) and its end with a status, so a failed
job shows as failed. A job of a sweep is not: the sweep's rows are its configurations,
each with the summary's aggregate and verdict (:mod:`linkbench.analysis.board`), and its
jobs are the runs each row's figures come from.
"""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import Path
from typing import Any

from torch.utils.tensorboard import SummaryWriter

from linkbench.analysis.board import hparam_text, session_end_pb, session_start_pb
from linkbench.config.plan import JobPlan
from linkbench.files import RECORD_EVENTS_SUFFIX
from linkbench.metrics import METRICS, honest, metric, table
from linkbench.result import JobResult

# result.json metric -> final/ tag: the built-in ones.
FINAL_METRICS = {m.name: m.tag for m in METRICS if m.tag}
# How an override spells "no value" (YAML's null).
NULLS = ("null", "None", "~")

# The custom-scalars charts: category -> title -> the metrics whose series it draws (each
# its live series, or its final/* scalar where it has no live one). A job's layout holds the
# charts it has a figure for (:func:`custom_scalars`), so none is empty.
CHARTS: dict[str, dict[str, tuple[str, ...]]] = {
    "throughput": {
        "samples/s (global)": ("samples_per_sec",),
        "samples/s per device": ("samples_per_sec_per_device",),
        "model FLOPs utilisation": ("mfu",),
    },
    "step time": {"ms/step": ("step_time_ms", "compute_step_ms")},
    "communication": {
        "exposed ms": ("comm_exposed_ms",),
        "fraction of step": ("comm_fraction",),
        "emulated link busbw GB/s": ("link_busbw_gb_s", "node_busbw_gb_s"),
    },
}


def custom_scalars(live: dict[str, Any], result: JobResult) -> dict[str, Any]:
    """The layout of the charts the job has data for: a chart where the job has one of its
    series, a metric's live one where the first run (the one rank 0 writes them for:
    ``live``, its metrics) has a standing figure of it, its final/* scalar where it has no
    live series and ``result`` has one; each collective's bus bandwidth by message size
    (``task=allreduce``). A chart lists all its series however many the job has, so that
    TensorBoard, merging every job's layout, shows it once."""
    running, final = honest(live), honest(result.get("metrics") or {})
    layout: dict[str, Any] = {}
    for category, charts in CHARTS.items():
        for title, names in charts.items():
            found = [m for m in map(metric, names) if m is not None]
            if any(m.name in (running if m.live else final) for m in found):
                series = [f"^{m.live or m.tag}$" for m in found]
                layout.setdefault(category, {})[title] = ["Multiline", series]
    for op in dict.fromkeys(row["op"] for row in result.get("collectives") or []):
        chart = ["Multiline", [f"^collectives/{op}/busbw_gb_s$"]]
        layout.setdefault("throughput", {})[f"{op} busbw GB/s by log2(bytes)"] = chart
    return layout


# result.json fields every job logs as hyperparameters (after the keys its overrides set).
HPARAM_FIELDS = (
    "task", "backend", "interconnect", "precision", "scaling", "model", "optimizer",
    "strategy", "data", "batch", "global_batch", "world_size", "lr", "steps", "seed",
)  # fmt: skip


# An option's keys that say which option it is, not how it is set.
NOT_SETTINGS = ("name", "_target_", "description", "expected_transport")


def option_settings(prefix: str, option: Any) -> dict[str, Any]:
    """An option's own settings of one value each, as its override names them
    (``strategy.bucket_cap_mb``, ``interconnect.rate_gbit_s``): a new strategy's or link's
    setting is a column without a word here. Choices are their names; lists and nested
    options are left out."""
    found: dict[str, Any] = {}
    for key in (f.name for f in dataclasses.fields(option) if f.name not in NOT_SETTINGS):
        value = getattr(option, key)
        if isinstance(value, Enum):
            value = str(value.value)
        if value is None or isinstance(value, (bool, int, float, str)):
            found[f"{prefix}.{key}"] = value
    return found


def hparams_of(plan: JobPlan, result: JobResult) -> dict[str, Any]:
    """The keys the job's overrides set, then the fixed set every job logs: as text
    (:func:`linkbench.analysis.board.hparam_text`), so a column is one type and ``8`` reads
    8, bools as they are."""
    c = plan.config
    values = {key: result.get(key) for key in HPARAM_FIELDS}
    if (hook := c.strategy.hook()) is not None:
        values["strategy/comm_hook"] = hook.name  # as a sweep's override names it
    values.update(option_settings("strategy", c.strategy))
    if (arm := c.interconnect.link()) is not None:
        values.update(option_settings("interconnect", arm))
    ordered = {**plan.settings, **values}
    # A key left unset is left out (TensorBoard shows it empty).
    return {
        k: v if isinstance(v, bool) else hparam_text(v)
        for k, v in ordered.items()
        if v is not None and v not in NULLS
    }


def write_job_summary(
    plan: JobPlan,
    result: JobResult,
    repeat_metrics: list[dict[str, Any]],
    completed: bool,
    started_s: float,
    in_sweep: bool = False,
) -> None:
    """The launching process's once-per-job record: final/*, repeats/* and trace/* scalars,
    the custom-scalars layout, and for a lone job (not ``in_sweep``) the HParams session
    (from ``started_s``, seconds since the epoch, to now), named by its directory."""
    metrics = honest(result["metrics"])
    writer = SummaryWriter(log_dir=plan.job_dir, filename_suffix=RECORD_EVENTS_SUFFIX)
    try:
        file_writer = writer.file_writer
        assert file_writer is not None  # SummaryWriter opens it in its constructor
        if not in_sweep:
            name = Path(plan.job_dir).name
            file_writer.add_summary(session_start_pb(name, hparams_of(plan, result), started_s))
            file_writer.add_summary(session_end_pb(completed))
        first = repeat_metrics[0] if repeat_metrics else {}
        if layout := custom_scalars(first, result):
            writer.add_custom_scalars(layout)
        entries = table()  # the built-in ones and the task's own
        for m in entries:
            if m.tag and m.name in metrics:
                writer.add_scalar(m.tag, metrics[m.name], 0)
        for repeat, values in enumerate(map(honest, repeat_metrics)):
            for m in entries:
                if m.per_repeat and m.name in values:
                    writer.add_scalar(f"repeats/{m.name}", values[m.name], repeat)
        trace = result.get("trace") or {}
        for key in ("step_ms", "untraced_step_ms", "stretch"):
            if isinstance((trace.get("mean") or {}).get(key), float):
                writer.add_scalar(f"trace/{key}", trace["mean"][key], 0)
        for rank in trace.get("ranks", []):
            for key, value in rank.items():
                if key.endswith(("_ms", "_ratio")) and isinstance(value, float) and value >= 0:
                    writer.add_scalar(f"trace/rank{rank['rank']}/{key}", value, 0)
    finally:
        writer.close()
