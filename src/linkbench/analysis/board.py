"""The sweep's answer in TensorBoard, beside one run per job: what a reviewer sees on opening
``tensorboard --logdir SWEEP``.

- **HParams**: one row per configuration, named by its swept settings (TensorBoard's session
  group), with the swept settings and the verdict as its first hyperparameter columns and
  the summary's own aggregate as its first metric columns, in the order a reviewer reads
  them: throughput (or the task's headline), step time, the ratio against the baseline and
  its interval's bounds, then communication, link bandwidth and the rest the sweep
  recorded (:func:`columns`). The experiment summary (``HParamsPluginData.experiment``)
  fixes that order and the names with their units; without one TensorBoard shows the first
  five scalar tags in alphabetical order.
- **Text**: summary.md, verdicts and tables, listed first (``Sweep summary``).
- **Images**: every plot of the summary.

Only figures that stand are written (:func:`linkbench.metrics.stands`): a probe's figure
below its noise, or a negative time, is left out, not shown as data.

Layout, under the sweep directory (``SWEEP_RUN``)::

    _summary/<n>-jobs/               the experiment summary, summary.md, the plots
    _summary/<n>-jobs/<k>_<name>/    configuration k's session and its scalars

``<n>`` counts the jobs summarised. TensorBoard keeps the first metadata a run records (its
hyperparameters, the experiment), so an update is a run of its own: each write makes a new
``<n>-jobs`` (``<n>-jobs-v2``... where the same jobs are summarised again) and removes the
older ones, which a running TensorBoard drops at its
next reload (both its loaders do). A re-analysis (another axis, written beside the sweep's
own summary) gets the text and plots alone: one experiment per logdir, the sweep's.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import shutil
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.compat.proto.types_pb2 import DT_STRING
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.plugins.text import metadata as text_metadata
from tensorboard.summary.writer.record_writer import RecordWriter

from linkbench.analysis.compare import Comparison, SweepComparisons
from linkbench.analysis.sweep import REPEAT_KEYS, Configuration
from linkbench.analysis.tables import marks
from linkbench.files import SWEEP_RUN
from linkbench.metrics import Metric, entry_of, stands, table

# Result fields that may explain a row beside its swept settings (the global batch and
# learning rate a swept batch sets): shown where they differ between configurations.
CONTEXT = ("global_batch", "lr", "world_size", "nnodes", "backend", "precision", "model",
           "strategy", "data")  # fmt: skip
VERDICT = "verdict"
BASELINE, NOT_JUDGED = "baseline", "not judged"
# TensorBoard shows the first five hyperparameter columns, then the metrics: context joins the
# swept settings and the verdict only up to this many, so the metrics stay on the screen.
HPARAM_COLUMNS = 3
# After the ratio, the columns a reviewer reads next; then the rest, in the metric table's order.
READING_ORDER = ("comm_fraction", "comm_exposed_ms", "link_busbw_gb_s", "node_busbw_gb_s", "mfu")
TEXT_TAG = "Sweep summary"  # listed before the jobs' own texts (config, hardware, overrides)
_FILES = itertools.count()  # this process's event files, apart in name


def hparam_text(value: Any) -> str:
    """A hyperparameter as a reviewer reads it: ``8``, not ``8.0000`` (TensorBoard prints a
    number with five digits, so every value is written as text)."""
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


@dataclass(frozen=True)
class Column:
    """One metric column of the HParams table: its tag, its header, and its value in each
    configuration (None: left empty)."""

    tag: str
    display: str
    description: str
    value: Callable[[Configuration], float | None]


def _heading(entry: Metric) -> str:
    """A metric's column header: its words and its unit."""
    if not entry.unit or entry.unit in entry.label:
        return entry.label
    return f"{entry.label}, {entry.unit}"


def mean_of(config: Configuration, name: str) -> float | None:
    """The configuration's mean of ``name`` over its runs where it stands as data (not a
    probe's figure any job marked, nor a negative time; held-out figures only of data whose
    labels can be learnt)."""
    entry = entry_of(name)
    if entry.learnable_only and not config.learnable():
        return None
    found = config.mean(name)
    if found is None or not stands(entry, found.mean, bool(marks(config))):
        return None
    return found.mean


def _mean_column(name: str) -> Column:
    entry = entry_of(name)
    how = "geometric" if entry.geometric else "arithmetic"
    return Column(
        f"sweep/{name}",
        _heading(entry),
        f"{entry.label}: the {how} mean over the configuration's runs, as summary.md gives it",
        lambda config: mean_of(config, name),
    )


def _ratio_columns(found: SweepComparisons) -> list[Column]:
    first = found.comparisons[0]
    by_arm = {id(c.arm): c for c in found.comparisons}
    level = f"{100 * found.confidence:.4g} %"
    against = f"{first.axis}={first.baseline}"

    def part(pick: Callable[[Comparison], float], bound: bool) -> Callable[..., float | None]:
        def value(config: Configuration) -> float | None:
            found = by_arm.get(id(config))
            if found is None or (bound and not found.ratio.has_interval):
                return None
            number = pick(found)
            return number if math.isfinite(number) else None

        return value

    estimate = part(lambda c: c.ratio.estimate, False)
    low, high = part(lambda c: c.ratio.low, True), part(lambda c: c.ratio.high, True)
    what = f"this configuration's {first.unit} over its baseline's ({against}, the other "
    return [
        Column("sweep/ratio", f"{first.unit} ratio vs {against}",
               what + "settings equal): a ratio of geometric means", estimate),
        Column("sweep/ratio_low", f"ratio, {level} low",
               f"the ratio's {level} interval from runs, its low end", low),
        Column("sweep/ratio_high", f"ratio, {level} high",
               f"the ratio's {level} interval from runs, its high end", high),
    ]  # fmt: skip


def columns(found: SweepComparisons) -> list[Column]:
    """The HParams table's metric columns, in reading order: the headline, step time, the
    ratio and its interval (where the sweep compares), then communication, link bandwidth
    (:data:`READING_ORDER`) and every other metric of the table that some configuration has
    as standing data, then the runs counted. TensorBoard shows the first five."""
    configs = found.configs
    if not configs:
        return []
    headline, _ = configs[0].headline()
    tagged = [m.name for m in table() if m.tag]
    first, rest = [headline, "step_time_ms"], [*READING_ORDER, *tagged]
    chosen = [_mean_column(n) for n in dict.fromkeys(first + rest)]
    chosen = [c for c in chosen if any(c.value(config) is not None for config in configs)]
    lead = sum(c.tag in {f"sweep/{n}" for n in first} for c in chosen)
    ratio = _ratio_columns(found) if found.comparisons else []
    runs = Column("sweep/runs", "runs", "the runs the configuration's figures count",
                  lambda config: float(len(config.values(headline))))  # fmt: skip
    return [*chosen[:lead], *ratio, *chosen[lead:], runs]


def verdicts(found: SweepComparisons) -> dict[int, str]:
    """id(configuration) -> its verdict against the baseline, ``baseline``, or ``not
    judged`` (a side had no run to count); {} where the sweep compares nothing."""
    if not found.comparisons and not found.unjudged:
        return {}
    out = {id(c.arm): c.verdict for c in found.comparisons}
    out |= {id(c.base): BASELINE for c in found.comparisons}
    for arm, base in found.unjudged:
        out[id(arm)] = NOT_JUDGED
        out.setdefault(id(base), BASELINE)
    return out


def hparams(found: SweepComparisons) -> tuple[list[api_pb2.HParamInfo], list[dict[str, str]]]:
    """The hyperparameter columns (the swept settings and the verdict first, then the
    context that differs between configurations) and each configuration's values."""
    configs = found.configs
    axes = [k for k in found.keys if k not in REPEAT_KEYS]
    judged = verdicts(found)
    values: list[dict[str, str]] = []
    for config in configs:
        row = {k: hparam_text(config.values_by_key.get(k)) for k in axes}
        if judged:
            row[VERDICT] = judged.get(id(config), NOT_JUDGED)
        for key in CONTEXT:
            if key not in axes and config.first(key) is not None:
                row[key] = hparam_text(config.first(key))
        values.append(row)
    room = max(0, HPARAM_COLUMNS - len(axes) - bool(judged))
    context = [k for k in CONTEXT if len({row.get(k) for row in values}) > 1][:room]
    for row in values:
        for key in [k for k in row if k in CONTEXT and k not in context]:
            del row[key]
    infos = [_info(k, k, "a setting the sweep varies", values, True) for k in axes]
    if judged:
        first = found.comparisons[0] if found.comparisons else None
        against = f" vs {first.axis}={first.baseline}" if first else ""
        infos.append(_info(VERDICT, f"verdict{against}", "faster, slower, equal or "
                           "inconclusive (summary.md says how and why)", values, True))  # fmt: skip
    infos += [_info(k, k, "set by the swept settings", values, False) for k in context]
    return infos, values


def _info(
    name: str, display: str, description: str, rows: list[dict[str, str]], differs: bool
) -> api_pb2.HParamInfo:
    """One hyperparameter column, its values a discrete domain (checkboxes to filter by).
    TensorBoard sorts the columns that differ first, by name, and shows the first five:
    ``differs`` is set for the swept settings and the verdict alone, so context follows."""
    info = api_pb2.HParamInfo(name=name, display_name=display, description=description,
                              type=api_pb2.DATA_TYPE_STRING, differs=differs)  # fmt: skip
    info.domain_discrete.extend(list(dict.fromkeys(r[name] for r in rows if name in r)))
    return info


def _summary_of(tag: str, data: plugin_data_pb2.HParamsPluginData) -> Summary:
    summary = Summary()
    summary.value.add(
        tag=tag, metadata=metadata.create_summary_metadata(data), tensor=metadata.NULL_TENSOR
    )
    return summary


def experiment_pb(
    hparam_infos: Iterable[api_pb2.HParamInfo], metric_infos: Iterable[api_pb2.MetricInfo]
) -> Summary:
    """The HParams experiment summary: its columns, in order."""
    experiment = api_pb2.Experiment(
        hparam_infos=list(hparam_infos), metric_infos=list(metric_infos),
        time_created_secs=time.time(),
    )  # fmt: skip
    return _summary_of(
        metadata.EXPERIMENT_TAG, plugin_data_pb2.HParamsPluginData(experiment=experiment)
    )


def session_start_pb(group: str, values: dict[str, Any], started_s: float) -> Summary:
    """A session's start: its row (``group``: sessions of one group are one row) and its
    hyperparameters (text, bools and numbers as they are)."""
    info = plugin_data_pb2.SessionStartInfo(group_name=group, start_time_secs=started_s)
    for key, value in values.items():
        if isinstance(value, bool):
            info.hparams[key].bool_value = value
        elif isinstance(value, (int, float)):
            info.hparams[key].number_value = float(value)
        else:
            info.hparams[key].string_value = str(value)
    return _summary_of(
        metadata.SESSION_START_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_start_info=info)
    )


def session_end_pb(completed: bool) -> Summary:
    """A session's end with its status (TensorBoard's own ``session_end_pb`` needs
    TensorFlow; this is the same summary from the plugin's metadata helpers)."""
    status = api_pb2.STATUS_SUCCESS if completed else api_pb2.STATUS_FAILURE
    info = plugin_data_pb2.SessionEndInfo(status=status, end_time_secs=time.time())
    return _summary_of(
        metadata.SESSION_END_INFO_TAG, plugin_data_pb2.HParamsPluginData(session_end_info=info)
    )


def text_pb(tag: str, markdown: str) -> Summary:
    """Markdown for the Text dashboard."""
    tensor = TensorProto(
        dtype=DT_STRING,
        string_val=[markdown.encode()],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    summary = Summary()
    summary.value.add(
        tag=tag, metadata=text_metadata.create_summary_metadata(tag, ""), tensor=tensor
    )
    return summary


def image_pb(tag: str, png: bytes) -> Summary:
    """A PNG as it is, for the Images dashboard (its size from its header)."""
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    image = Summary.Image(height=height, width=width, colorspace=4, encoded_image_string=png)
    return Summary(value=[Summary.Value(tag=tag, image=image)])


def scalar_pb(tag: str, value: float) -> Summary:
    return Summary(value=[Summary.Value(tag=tag, simple_value=value)])


def write_events(run_dir: Path, summaries: Iterable[Summary], step: int = 0) -> None:
    """One event file in ``run_dir`` (a TensorBoard run) holding ``summaries``, written here
    and now (TensorBoard's record format, no writer thread: a handful of events, and any
    error, a full disk's say, raised where it happens)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
    path = run_dir / f"{name}.{next(_FILES)}"
    events = [Event(wall_time=time.time(), file_version="brain.Event:2")]
    events += [Event(wall_time=time.time(), step=step, summary=s) for s in summaries]
    with path.open("wb") as handle:
        writer = RecordWriter(handle)
        for event in events:
            writer.write(event.SerializeToString())


def row_name(index: int, count: int, config: Configuration) -> str:
    """A configuration's row: its place in the summary's order (TensorBoard lists rows by
    name) and its settings, as summary.md names it: ``2: interconnect=nvlink, batch=16``."""
    return f"{index:0{len(str(count))}d}: {config.label()}"


def _run_name(index: int, config: Configuration) -> str:
    """A configuration's session directory, in the same order."""
    name = ",".join(f"{k}={v}" for k, v in config.settings) or "one-configuration"
    name = name.replace("%", "%25").replace("/", "%2F")[:120]
    return f"{index:02d}_{name}"


def _version(base: Path, name: str) -> str:
    """``name``, or where a run of that name was written before (the same jobs summarised
    again: a job run again, a summary rewritten), ``name-v<k>`` past the last: a new name,
    so that a running TensorBoard reads it afresh."""
    if not (base / name).exists():
        return name
    found = [re.fullmatch(rf"{re.escape(name)}-v(\d+)", p.name) for p in base.iterdir()]
    return f"{name}-v{max([1, *(int(m[1]) for m in found if m)]) + 1}"


def write_board(
    out_dir: Path, found: SweepComparisons, text: str, plots: list[Path], own: bool, jobs: int
) -> Path:
    """The sweep's TensorBoard run under ``out_dir`` (module docstring): with ``own`` (the
    sweep's own summary) the HParams experiment and one session per configuration; always
    summary.md as text and ``plots`` as images. Returns the run's directory."""
    base = out_dir / SWEEP_RUN
    run = base / _version(base, f"{jobs}-jobs")
    making = base / f".{run.name}.tmp"  # renamed into place whole: a full disk leaves nothing
    shutil.rmtree(making, ignore_errors=True)
    making.mkdir(parents=True)
    try:
        _write_run(making, found, text, plots, own)
        making.rename(run)
    except BaseException:
        shutil.rmtree(making, ignore_errors=True)
        raise
    for old in base.glob("*-jobs*"):
        if old != run and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)
    for stray in base.glob("events.out.tfevents.*"):  # an older linkbench's sweep run
        stray.unlink(missing_ok=True)
    return run


def _write_run(run: Path, found: SweepComparisons, text: str, plots: list[Path], own: bool) -> None:
    """The sweep's run and its configurations' sessions, into ``run``."""
    summaries = [text_pb(TEXT_TAG, text)]
    summaries += [image_pb(f"sweep/{p.stem}", p.read_bytes()) for p in plots if p.is_file()]
    configs = found.configs
    if own and configs:
        infos, values = hparams(found)
        metric_columns = columns(found)
        metric_infos = [
            api_pb2.MetricInfo(
                name=api_pb2.MetricName(tag=c.tag),
                display_name=c.display,
                description=c.description,
            )
            for c in metric_columns
        ]
        summaries.insert(0, experiment_pb(infos, metric_infos))
        for index, (config, row) in enumerate(zip(configs, values, strict=True), 1):
            figures = [(c.tag, c.value(config)) for c in metric_columns]
            session = [
                session_start_pb(row_name(index, len(configs), config), row, time.time()),
                *(scalar_pb(tag, value) for tag, value in figures if value is not None),
                session_end_pb(bool(config.runs())),
            ]
            write_events(run / _run_name(index, config), session)
    write_events(run, summaries)
