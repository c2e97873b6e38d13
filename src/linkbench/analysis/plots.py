"""PNG plots of a sweep (matplotlib, no display needed).

Throughput against the per-device batch, one line per other setting, with 95 % intervals
over runs; the exposed-communication fraction likewise; each comparison's ratio with its
interval beside the ±margin band of "equal" (``ratios.png``); for all-reduce sweeps, bus
bandwidth against message size; over emulated links, step time against the link's rate with
what the bytes predict (``link_rate.png``). Without a batch sweep, bars per configuration.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter, NullLocator

from linkbench.analysis.compare import Comparison
from linkbench.analysis.emulated import LinkRow, link_rows, predicted_at_rate
from linkbench.analysis.stats import Mean
from linkbench.analysis.sweep import Configuration
from linkbench.files import (
    BUSBW_PLOT,
    LINK_RATE_PLOT,
    RATIOS_PLOT,
    STEP_BREAKDOWN_PLOT,
    links_plot,
    replace_atomically,
)
from linkbench.metrics import Metric, is_geometric, metric, table

DODGE = 0.04  # of a factor of 2 on the batch axis, between the series of one plot


def plotted() -> list[Metric]:
    """The metrics with a plot of their own (a task's own included)."""
    return [m for m in table() if m.plot]


def _errors(means: list[Mean]) -> list[list[float]]:
    return [
        [m.mean - m.low if m.has_interval else 0.0 for m in means],
        [m.high - m.mean if m.has_interval else 0.0 for m in means],
    ]


def _save(figure: Figure, path: Path) -> Path:
    """Save the figure whole or not at all (a full disk leaves no empty plot)."""
    figure.tight_layout()
    try:
        replace_atomically(path, lambda tmp: figure.savefig(tmp, dpi=110, format=path.suffix[1:]))
    finally:
        plt.close(figure)
    return path


def _plot_metric(sweep_dir: Path, configs: list[Configuration], key: str) -> Path | None:
    points = [(c, m) for c in configs if (m := c.mean(key)) is not None]
    if not points:
        return None
    found = metric(key)
    assert found is not None and found.plot is not None
    name, ylabel = found.plot, found.label
    figure, axes = plt.subplots(figsize=(7, 4.2))
    if all("batch" in c.values_by_key for c, _ in points):
        lines: dict[str, list[tuple[int, Mean]]] = {}
        for config, mean in points:
            label = config.label(skip="batch")
            lines.setdefault(label, []).append((config.values_by_key["batch"], mean))
        for index, (label, line) in enumerate(sorted(lines.items())):
            line.sort(key=lambda point: point[0])
            # each series a little to the side (log2 axis), so that no error bar hides another
            shift = 2 ** (DODGE * (index - (len(lines) - 1) / 2))
            x, means = [b * shift for b, _ in line], [m for _, m in line]
            axes.errorbar(x, [m.mean for m in means], yerr=_errors(means), marker="o",
                          capsize=4, label=label)  # fmt: skip
        axes.set_xscale("log", base=2)
        batches = sorted({c.values_by_key["batch"] for c, _ in points})
        axes.set_xticks(batches, [str(b) for b in batches])
        axes.set_xlabel("per-device batch")
        axes.legend(fontsize=8)
    else:
        means = [m for _, m in points]
        axes.bar(range(len(means)), [m.mean for m in means], yerr=_errors(means), capsize=4)
        labels = [c.label() for c, _ in points]
        axes.set_xticks(range(len(means)), labels, rotation=20, ha="right", fontsize=8)
    axes.set_ylabel(ylabel)
    kind = "geometric mean" if is_geometric(key) else "mean"
    axes.set_title(f"{ylabel}: {kind}, bars 95% interval over runs", fontsize=10)
    axes.grid(alpha=0.3)
    return _save(figure, sweep_dir / name)


def _plot_ratios(sweep_dir: Path, comparisons: list[Comparison]) -> Path | None:
    """Each comparison's ratio and interval, with the band inside which it reads "equal"."""
    if not comparisons:
        return None
    figure, axes = plt.subplots(figsize=(7, 0.6 * len(comparisons) + 1.6))
    margin = comparisons[0].margin
    axes.axvspan(1 - margin, 1 + margin, color="tab:green", alpha=0.15)
    axes.axvline(1.0, color="grey", lw=1)
    axes.set_xscale("log")  # a speed-up and the slow-down it undoes lie equally far from 1
    ends = [1 - margin, 1 + margin]
    for row, c in enumerate(comparisons):
        r = c.ratio
        color = {"faster": "tab:blue", "slower": "tab:red"}.get(c.verdict, "black")
        axes.errorbar([r.estimate], [row], xerr=[[r.estimate - r.low], [r.high - r.estimate]],
                      fmt="o", color=color, capsize=4)  # fmt: skip
        ends += [v for v in (r.low, r.high) if 0 < v < float("inf")]
    axes.xaxis.set_major_locator(FixedLocator(ratio_ticks(min(ends), max(ends))))
    axes.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axes.xaxis.set_minor_formatter(NullFormatter())
    _ratio_axis_labels(axes, comparisons)
    return _save(figure, sweep_dir / RATIOS_PLOT)


def ratio_ticks(low: float, high: float) -> list[float]:
    """A few plain ticks (0.42, 0.65, 1) for a log axis of ratios from ``low`` to ``high``,
    instead of matplotlib's own, which print as colliding powers of ten (3x10^-1 4x10^-1)
    when the ratios span less than a decade."""
    return sorted({1.0, *(float(f"{t:.2g}") for t in np.geomspace(low, high, 5))})


def _ratio_axis_labels(axes: Axes, comparisons: list[Comparison]) -> None:
    labels = [
        f"{c.axis}={c.arm_value}" + (f" @ {c.where}" if c.where else "") + f": {c.verdict}"
        for c in comparisons
    ]
    axes.set_yticks(range(len(comparisons)), labels, fontsize=8)
    axes.invert_yaxis()
    first = comparisons[0]
    axes.set_xlabel(f"{first.metric} ratio against {first.axis}={first.baseline}")
    axes.set_title(
        f"ratio, 95% interval over runs; green band: ±{first.margin:.0%} (equal)", fontsize=10
    )
    axes.grid(alpha=0.3, axis="x")


BREAKDOWN = (
    ("compute_only_ms", "compute", "tab:blue"),
    ("overlapped_ms", "overlapped communication", "tab:green"),
    ("exposed_comm_ms", "exposed communication", "tab:red"),
    ("other_ms", "other (idle, copies)", "tab:grey"),
)


def _plot_breakdown(sweep_dir: Path, configs: list[Configuration]) -> Path | None:
    """A stacked bar of each traced configuration's step."""
    traced = [(c, t) for c in configs if (t := c.trace_means()) is not None]
    if not traced:
        return None
    figure, axes = plt.subplots(figsize=(7, 0.5 * len(traced) + 1.8))
    left = [0.0] * len(traced)
    for key, label, color in BREAKDOWN:
        widths = [max(0.0, t[key]) for _, t in traced]
        axes.barh(range(len(traced)), widths, left=left, color=color, label=label)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    axes.set_yticks(range(len(traced)), [c.label() for c, _ in traced], fontsize=8)
    axes.invert_yaxis()
    axes.set_xlabel("ms per step (profiled steps, mean over ranks)")
    axes.set_title("where the step goes", fontsize=10)
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4)
    axes.grid(alpha=0.3, axis="x")
    return _save(figure, sweep_dir / STEP_BREAKDOWN_PLOT)


def _plot_busbw_by_size(sweep_dir: Path, configs: list[Configuration]) -> Path | None:
    figure, axes = plt.subplots(figsize=(7, 4.2))
    drawn = False
    for config in configs:
        job = next((j for j in config.jobs if j.get("collectives")), None)
        if job is None:
            continue
        rows = [r for r in job["collectives"] if r["op"] == "all_reduce"]
        axes.plot([r["bytes"] for r in rows], [r["busbw_gb_s"] for r in rows], marker=".",
                  label=config.label())  # fmt: skip
        drawn = True
    if not drawn:
        plt.close(figure)
        return None
    axes.set_xscale("log", base=2)
    axes.set_xlabel("message bytes")
    axes.set_ylabel("all_reduce busbw (GB/s)")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    return _save(figure, sweep_dir / BUSBW_PLOT)


def plot_link_matrices(job_dir: Path, matrices: dict[str, list[list[float | None]]]) -> list[Path]:
    """One heatmap per pair measurement of a ``task=links`` job: GB/s, source row to
    destination column."""
    made = []
    for kind, grid in matrices.items():
        n = len(grid)
        values = [[v if v is not None else float("nan") for v in row] for row in grid]
        figure, axes = plt.subplots(figsize=(1.0 + 0.7 * n, 0.8 + 0.6 * n))
        image = axes.imshow(values, cmap="viridis")
        for i in range(n):
            for j in range(n):
                if grid[i][j] is not None:
                    axes.text(j, i, f"{grid[i][j]:.0f}", ha="center", va="center", fontsize=7,
                              color="white")  # fmt: skip
        axes.set_xticks(range(n))
        axes.set_yticks(range(n))
        axes.set_xlabel("to GPU")
        axes.set_ylabel("from GPU")
        axes.set_title(f"{kind} GB/s", fontsize=10)
        figure.colorbar(image)
        made.append(_save(figure, links_plot(job_dir, kind)))
    return made


def _plot_link_rate(sweep_dir: Path, rows: list[LinkRow]) -> Path | None:
    """Step time against the emulated link's rate: measured (95 % intervals over runs) beside
    what the bytes predict at each rate (:mod:`linkbench.analysis.emulated`)."""
    if len({r.rate_gbit_s for r in rows}) < 2:
        return None
    figure, axes = plt.subplots(figsize=(7, 4.2))
    series: dict[str, list[LinkRow]] = {}
    for row in rows:
        series.setdefault(row.series, []).append(row)
    low, high = min(r.rate_gbit_s for r in rows) / 1.5, max(r.rate_gbit_s for r in rows) * 1.5
    rates = [low * (high / low) ** (i / 50) for i in range(51)]
    for label, line in sorted(series.items()):
        prefix = f"{label}: " if len(series) > 1 else ""
        line.sort(key=lambda r: r.rate_gbit_s)
        means = [r.step_ms for r in line]
        shown = axes.errorbar([r.rate_gbit_s for r in line], [m.mean for m in means],
                              yerr=_errors(means), marker="o", capsize=4, linestyle="none",
                              label=f"{prefix}measured")  # fmt: skip
        middle = line[len(line) // 2]
        predicted = [predicted_at_rate(middle, rate) for rate in rates]
        axes.plot(rates, predicted, linestyle="--", color=shown[0].get_color(),
                  label=f"{prefix}predicted from the bytes")  # fmt: skip
    axes.set_xscale("log")
    measured_rates = sorted({r.rate_gbit_s for r in rows})
    axes.set_xticks(measured_rates, [f"{rate:g}" for rate in measured_rates])
    axes.xaxis.set_minor_locator(NullLocator())
    axes.set_ylim(bottom=0)
    axes.set_xlabel("emulated link rate, Gbit/s each way")
    axes.set_ylabel("time per training step, ms")
    axes.set_title("step time against link rate: measured and predicted", fontsize=10)
    axes.legend(fontsize=7)
    axes.grid(alpha=0.3, which="both")
    return _save(figure, sweep_dir / LINK_RATE_PLOT)


def plot_sweep(
    sweep_dir: Path, configs: list[Configuration], comparisons: list[Comparison]
) -> list[Path]:
    """Write the plots that the sweep's data supports; returns their paths."""
    made = [_plot_metric(sweep_dir, configs, m.name) for m in plotted()]
    made += [_plot_ratios(sweep_dir, comparisons), _plot_busbw_by_size(sweep_dir, configs)]
    made.append(_plot_breakdown(sweep_dir, configs))
    made.append(_plot_link_rate(sweep_dir, link_rows(configs)))
    return [p for p in made if p is not None]
