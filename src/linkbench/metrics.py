"""The metrics a job reports that sweeps compare, in one table every reader takes them from:
the summary (means and verdicts), summary.csv, the plots, TensorBoard's ``final/*`` and
``repeats/*`` scalars and HParams columns. A new metric is one entry here.

A metric's ``name`` is its key in ``result.json``'s ``metrics``. Rates and times are
``geometric``: their means over runs are geometric and comparisons are ratios of them
(:mod:`linkbench.analysis.stats`); the rest (fractions, losses, accuracies) are arithmetic.
``better`` says which way a comparison counts as an improvement: ``higher``, ``lower``, or
``None`` for a metric that is reported and never judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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

    @property
    def lower_is_better(self) -> bool:
        return self.better == "lower"


METRICS: tuple[Metric, ...] = (
    Metric("samples_per_sec", "samples/s", "higher", True, "samples/s (global)",
           tag="final/samples_per_sec", per_repeat=True, plot="throughput.png"),
    Metric("samples_per_sec_per_device", "samples/s", "higher", True, "samples/s per device",
           tag="final/samples_per_sec_per_device"),
    Metric("step_time_ms", "ms", "lower", True, "time per training step",
           tag="final/step_time_ms", per_repeat=True, column=True),
    Metric("epoch_time_s", "s", "lower", True, "time per epoch"),
    Metric("mfu", "", "higher", False, "model FLOPs utilisation", tag="final/mfu"),
    Metric("comm_exposed_ms", "ms", "lower", False, "exposed communication per step",
           tag="final/comm_exposed_ms"),
    Metric("comm_fraction", "", "lower", False, "exposed communication / step",
           tag="final/comm_fraction", plot="comm_fraction.png", column=True),
    Metric("busbw_gbps_peak", "GB/s", "higher", True, "peak all_reduce busbw (GB/s)",
           tag="final/busbw_gbps_peak", per_repeat=True, plot="busbw_peak.png"),
    Metric("host_to_device_gbps", "GB/s", "higher", True, "host-to-device copy bandwidth"),
    Metric("final_loss", "", "lower", False, "training loss at the last step",
           tag="final/loss"),
    Metric("eval_loss", "", "lower", False, "held-out loss", tag="final/eval_loss"),
    Metric("eval_accuracy", "", "higher", False, "held-out top-1 accuracy",
           tag="final/eval_accuracy"),
)  # fmt: skip
BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric | None:
    """The table's entry for ``name`` (None for a key the table does not know)."""
    return BY_NAME.get(name)


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
