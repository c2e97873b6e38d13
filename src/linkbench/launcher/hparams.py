"""TensorBoard's record of a finished job, written once by the launching process.

When a job ends, the launching process writes into the job's run (its output directory)
the final metrics (``final/*``: medians over repeats), every repeat's headline
(``repeats/*``), a custom-scalars layout and the HParams session: its hyperparameters
(TensorBoard's ``hparams_pb``) and its end with a status, so failed jobs show as failed.
No experiment summary is written: TensorBoard then builds the HParams table from every
job's session, marks the hyperparameters whose values differ between jobs and lists every
metric, so no job's choice of columns hides another's (tensorflow/tensorboard issue 5596).
"""

from __future__ import annotations

import dataclasses
import time
from enum import Enum
from typing import Any

from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2, summary_v2
from torch.utils.tensorboard import SummaryWriter

from linkbench.config.plan import JobPlan
from linkbench.files import RECORD_EVENTS_SUFFIX
from linkbench.metrics import METRICS, metric, table
from linkbench.result import JobResult

# result.json metric -> final/ tag (also an HParams metric column): the built-in ones.
FINAL_METRICS = {m.name: m.tag for m in METRICS if m.tag}
# How an override spells "no value" (YAML's null).
NULLS = ("null", "None", "~")


def _series(*names: str) -> list[str]:
    """The live TensorBoard series of table metrics, as custom-scalar regexes (each whole);
    a name without one is a mistake here, not a chart to leave empty."""
    found = [metric(n) for n in names]
    series = [m.live for m in found if m is not None and m.live]
    assert len(series) == len(names), f"{names}: not all have a live series in the table"
    return [f"^{live}$" for live in series]


CUSTOM_SCALARS = {
    "throughput": {
        "samples/s (global)": ["Multiline", _series("samples_per_sec")],
        "samples/s per device": ["Multiline", _series("samples_per_sec_per_device")],
        "model FLOPs utilisation": ["Multiline", _series("mfu")],
        "all_reduce busbw GB/s by log2(bytes)": ["Multiline", ["collectives/all_reduce/busbw"]],
    },
    "step time": {"ms/step": ["Multiline", _series("step_time_ms", "compute_step_ms")]},
    "communication": {
        "exposed ms": ["Multiline", _series("comm_exposed_ms")],
        "fraction of step": ["Multiline", _series("comm_fraction")],
    },
}


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
    setting is a column without a word here. Numbers are floats, so a column of them stays
    one type; choices are their names; lists and nested options are left out."""
    found: dict[str, Any] = {}
    for key in (f.name for f in dataclasses.fields(option) if f.name not in NOT_SETTINGS):
        value = getattr(option, key)
        if isinstance(value, Enum):
            value = str(value.value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = float(value)
        if value is None or isinstance(value, (bool, float, str)):
            found[f"{prefix}.{key}"] = value
    return found


def hparams_of(plan: JobPlan, result: JobResult) -> dict[str, Any]:
    """The keys the job's overrides set, then the fixed set every job logs."""
    c = plan.config
    values = {key: result.get(key) for key in HPARAM_FIELDS}
    if (hook := c.strategy.hook()) is not None:
        values["strategy/comm_hook"] = hook.name  # as a sweep's override names it
    values.update(option_settings("strategy", c.strategy))
    if (arm := c.interconnect.link()) is not None:
        values.update(option_settings("interconnect", arm))
    ordered = {**plan.settings, **values}
    # A key left unset is left out (TensorBoard shows it empty), so a column of numbers
    # stays numbers instead of mixing in a string for "null".
    return {k: v for k, v in ordered.items() if v is not None and v not in NULLS}


def session_end_pb(completed: bool) -> Summary:
    """The HParams session's end with its status (TensorBoard's own ``session_end_pb`` needs
    TensorFlow; this is the same summary from the plugin's metadata helpers)."""
    status = api_pb2.STATUS_SUCCESS if completed else api_pb2.STATUS_FAILURE
    data = plugin_data_pb2.HParamsPluginData(
        session_end_info=plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=time.time())
    )
    summary = Summary()
    summary.value.add(
        tag=metadata.SESSION_END_INFO_TAG,
        metadata=metadata.create_summary_metadata(data),
        tensor=metadata.NULL_TENSOR,
    )
    return summary


def write_job_summary(
    plan: JobPlan,
    result: JobResult,
    repeat_metrics: list[dict[str, Any]],
    completed: bool,
    started_s: float,
) -> None:
    """The launching process's once-per-job record: the HParams session (from ``started_s``,
    seconds since the epoch, to now), final/*, repeats/* and trace/* scalars, the
    custom-scalars layout."""
    metrics = result["metrics"]
    writer = SummaryWriter(log_dir=plan.job_dir, filename_suffix=RECORD_EVENTS_SUFFIX)
    try:
        session = summary_v2.hparams_pb(
            hparams_of(plan, result), trial_id=plan.job_dir, start_time_secs=started_s
        )
        file_writer = writer.file_writer
        assert file_writer is not None  # SummaryWriter opens it in its constructor
        for summary in (session, session_end_pb(completed)):
            file_writer.add_summary(summary)
        writer.add_custom_scalars(CUSTOM_SCALARS)
        entries = table()  # the built-in ones and the task's own
        for m in entries:
            if m.tag and isinstance(metrics.get(m.name), (int, float)):
                writer.add_scalar(m.tag, metrics[m.name], 0)
        for repeat, values in enumerate(repeat_metrics):
            for m in entries:
                if m.per_repeat and isinstance(values.get(m.name), (int, float)):
                    writer.add_scalar(f"repeats/{m.name}", values[m.name], repeat)
        trace = result.get("trace") or {}
        for key in ("step_ms", "untraced_step_ms", "stretch"):
            if isinstance((trace.get("mean") or {}).get(key), float):
                writer.add_scalar(f"trace/{key}", trace["mean"][key], 0)
        for rank in trace.get("ranks", []):
            for key, value in rank.items():
                if key.endswith(("_ms", "_ratio")) and isinstance(value, float):
                    writer.add_scalar(f"trace/rank{rank['rank']}/{key}", value, 0)
    finally:
        writer.close()
