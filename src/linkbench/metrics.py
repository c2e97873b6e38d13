"""The metrics a job reports that sweeps compare, in one table every reader takes them from:
the summary (means and verdicts), summary.csv, the plots, TensorBoard's ``final/*`` and
``repeats/*`` scalars and HParams columns, and the series rank 0 writes as the job goes (its
``live`` tag, :mod:`linkbench.worker.metric_log`). A new metric is one entry here.

A metric's ``name`` is its key in ``result.json``'s ``metrics``. Rates and times are
``geometric``: their means over runs are geometric and comparisons are ratios of them
(:mod:`linkbench.analysis.stats`); the rest (fractions, losses, accuracies) are arithmetic.
``better`` says which way a comparison counts as an improvement: ``higher``, ``lower``, or
``None`` for a metric that is reported and never judged.

A task may bring entries of its own (``Task.metrics``, :mod:`linkbench.worker.task`): they are
recorded in each of its jobs' ``result.json`` (``metric_table``), and :func:`register` adds
them to a process's table in two places only: where a process defines the task's class
(``Task.__init_subclass__``, the launcher and every worker) and where a reader reads one of
its results (:func:`linkbench.result.read_result`), the analysis included.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

Better = Literal["higher", "lower"] | None


@dataclass(frozen=True)
class Metric:
    """One metric of ``result.json``, and how every reader treats it."""

    name: str
    unit: str
    better: Better
    geometric: bool
    label: str
    """What it is, in words (plot axes, tables)."""
    tag: str | None = None
    """Its TensorBoard scalar and HParams column (``final/...``); None: neither."""
    per_repeat: bool = False
    """Also a ``repeats/<name>`` scalar for each repeat of a job."""
    plot: str | None = None
    """The sweep's plot of it (a PNG file name); None: no plot."""
    column: bool = False
    """A column of summary.csv (the headline always is one)."""
    live: str | None = None
    """Its TensorBoard series as the job goes (``perf/...``, step by step); None: none."""
    probe: bool = False
    """Measured by the communication probe, whose note marks a figure below its noise (or
    its bias): such a figure is no data (:func:`stands`)."""
    learnable_only: bool = False
    """Says something only of data whose labels can be learnt (held-out accuracy and loss:
    chance on random labels)."""

    @property
    def lower_is_better(self) -> bool:
        return self.better == "lower"


METRICS: tuple[Metric, ...] = (
    Metric("samples_per_sec", "samples/s", "higher", True, "samples/s (global)",
           tag="final/samples_per_sec", per_repeat=True, plot="throughput.png",
           live="perf/samples_per_sec"),
    Metric("samples_per_sec_per_device", "samples/s", "higher", True, "samples/s per device",
           tag="final/samples_per_sec_per_device", live="perf/samples_per_sec_per_device"),
    Metric("step_time_ms", "ms", "lower", True, "time per training step",
           tag="final/step_time_ms", per_repeat=True, column=True, live="perf/step_time_ms"),
    Metric("epoch_time_s", "s", "lower", True, "time per epoch"),
    Metric("mfu", "", "higher", False, "model FLOPs utilisation", tag="final/mfu",
           live="perf/mfu"),
    Metric("comm_exposed_ms", "ms", "lower", False, "exposed communication per step",
           tag="final/comm_exposed_ms", live="perf/comm_exposed_ms", probe=True),
    Metric("comm_fraction", "", "lower", False, "exposed communication / step",
           tag="final/comm_fraction", plot="comm_fraction.png", column=True,
           live="perf/comm_fraction", probe=True),
    # Arithmetic: the projections add it to other times of the step.
    Metric("compute_step_ms", "ms", None, False, "a step without communication (the probe)",
           live="perf/compute_step_ms"),
    Metric("busbw_gb_s_peak", "GB/s", "higher", True, "peak all_reduce busbw (GB/s)",
           tag="final/busbw_gb_s_peak", per_repeat=True, plot="busbw_peak.png",
           live="perf/busbw_gb_s_peak"),
    Metric("link_busbw_gb_s", "GB/s", "higher", True, "emulated link's all_reduce busbw",
           tag="final/link_busbw_gb_s"),
    Metric("node_busbw_gb_s", "GB/s", "higher", True,
           "all_reduce busbw inside an emulated node", tag="final/node_busbw_gb_s"),
    Metric("host_to_device_gb_s", "GB/s", "higher", True, "host-to-device copy bandwidth"),
    Metric("final_loss", "", "lower", False, "training loss at the last step",
           tag="final/loss"),
    Metric("eval_loss", "", "lower", False, "held-out loss", tag="final/eval_loss",
           live="eval/loss", learnable_only=True),
    Metric("eval_accuracy", "", "higher", False, "held-out top-1 accuracy",
           tag="final/eval_accuracy", live="eval/accuracy", learnable_only=True),
    Metric("max_allocated_gb", "GB", None, False, "peak GPU memory allocated",
           live="mem/max_allocated_gb"),
    # Series of the run alone: result.json has no such metric.
    Metric("loss", "", None, False, "training loss (mean over the logged steps' batches)",
           live="train/loss"),
    Metric("lr", "", None, False, "learning rate", live="train/lr"),
)  # fmt: skip
BY_NAME = {m.name: m for m in METRICS}


def register(entries: Iterable[Metric | dict[str, Any]]) -> None:
    """Add a task's own entries (or their records from result.json) to the table; an entry
    never replaces a built-in one."""
    for entry in entries:
        found = entry if isinstance(entry, Metric) else Metric(**entry)
        BY_NAME.setdefault(found.name, found)


def recorded(entries: Iterable[Metric]) -> list[dict[str, Any]]:
    """The entries as result.json records them."""
    return [asdict(m) for m in entries]


def table() -> tuple[Metric, ...]:
    """Every entry: the built-in ones, then those registered."""
    return tuple(BY_NAME.values())


def metric(name: str) -> Metric | None:
    """The table's entry for ``name`` (None for a key the table does not know)."""
    return BY_NAME.get(name)


def entry_of(name: str) -> Metric:
    """The table's entry for ``name``, or a plain one for a key it does not know (no unit,
    never judged, arithmetic)."""
    return metric(name) or Metric(name, "", None, False, name)


def is_geometric(name: str) -> bool:
    """Whether means of ``name`` over runs are geometric (unknown keys: arithmetic)."""
    found = metric(name)
    return found is not None and found.geometric


def lower_is_better(name: str) -> bool:
    """Whether a lower ``name`` is the better one (unknown keys count as rates)."""
    found = metric(name)
    return found is not None and found.lower_is_better


def unit(name: str) -> str:
    """``name``'s unit ("" for a number without one, or a key the table does not know)."""
    found = metric(name)
    return found.unit if found is not None else ""


NOISE, BIAS = "below this probe's noise", "a bias of this probe"


def noise_note(exposed: float, low: float, high: float, windows: int) -> str | None:
    """What the record says when the probe cannot measure the exposed communication: its
    interval holds 0 (below its noise), or lies wholly below 0 (a bias: the no_sync steps
    ran slower than the synced ones, so they are no synced step less its communication).
    The words before the colon are the mark every table prints beside the number."""
    if windows >= 2 and low <= 0 <= high:
        return (
            f"{NOISE}: {exposed:+.3f} ms [{low:+.3f}, {high:+.3f}] over {windows} alternating "
            "windows includes 0; raise task.no_sync_steps for a finer measurement"
        )
    if windows >= 2 and high < 0:
        return (
            f"{BIAS}: the no_sync steps took {-exposed:.3f} ms [{-high:.3f}, {-low:.3f}] longer "
            "than the synced ones on the same rank, beyond the probe's noise, so here they are "
            "no measure of the synced step less its communication; the trace (profile=trace) "
            "measures it another way"
        )
    if exposed < 0:
        return (
            f"{NOISE}: negative, the no_sync steps took {-exposed:.3f} ms longer than the synced "
            "ones in one window; raise task.no_sync_steps for a finer measurement"
        )
    return None


def exposed_note(metrics: dict[str, Any]) -> str | None:
    """:func:`noise_note` of the exposed communication ``metrics`` hold (one run's, or the
    medians of a job's runs); None without a probe's figures."""
    keys = ("comm_exposed_ms", "comm_exposed_ms_low", "comm_exposed_ms_high")
    if not all(isinstance(metrics.get(k), (int, float)) for k in keys):
        return None
    exposed, low, high = (float(metrics[k]) for k in keys)
    return noise_note(exposed, low, high, int(metrics.get("comm_exposed_windows", 0)))


def probe_mark(metrics: Mapping[str, Any]) -> str | None:
    """The mark every table prints beside a job's exposed communication when its probe could
    not measure it: the words of its ``comm_exposed_note`` before the colon ("below this
    probe's noise", or "a bias of this probe"); None when the figure stands."""
    note = metrics.get("comm_exposed_note")
    return str(note).split(":")[0] if note else None


TIME_UNITS = ("ms", "s", "us")


def stands(entry: Metric, value: float, marked: bool) -> bool:
    """Whether a figure of ``entry`` may be shown as data: finite, no time below zero, and
    no probe's figure its note marked (``marked``: below its noise, or a bias)."""
    if not math.isfinite(value) or (entry.probe and marked):
        return False
    return not (entry.unit in TIME_UNITS and value < 0)


def honest(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of one run's (or job's) ``metrics`` that stand as data (:func:`stands`),
    what TensorBoard is given: a figure left out is no figure, never a wrong one. A key the
    table does not know passes when finite."""
    marked = probe_mark(metrics) is not None
    out = {}
    for name, value in metrics.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if stands(entry_of(name), float(value), marked):
            out[name] = float(value)
    return out
