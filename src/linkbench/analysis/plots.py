"""PNG plots of a sweep (matplotlib, no display needed).

Throughput against the per-device batch, one line per interconnect (or other setting), with
min-max bars over repeats; the exposed-communication fraction likewise; for all-reduce sweeps,
bus bandwidth against message size. Without a batch sweep, bars per configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

PLOTS = {
    "samples_per_sec": ("throughput.png", "samples/s (global)"),
    "comm_fraction": ("comm_fraction.png", "exposed communication / step"),
    "busbw_gbps_peak": ("busbw_peak.png", "peak all_reduce busbw (GB/s)"),
}


def _label(settings: dict[str, Any], skip: str) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items() if k != skip) or "all"


def _plot_metric(sweep_dir: Path, configs: list, key: str) -> Path | None:
    points = [(dict(c.settings), c.noise(key)) for c in configs]
    points = [(s, n) for s, n in points if n is not None]
    if not points:
        return None
    name, ylabel = PLOTS[key]
    figure, axes = plt.subplots(figsize=(7, 4.2))
    if all("batch" in s for s, _ in points):
        lines: dict[str, list] = {}
        for settings, noise in points:
            lines.setdefault(_label(settings, "batch"), []).append((settings["batch"], noise))
        for label, line in sorted(lines.items()):
            line.sort()
            x = [b for b, _ in line]
            y = [n[0] for _, n in line]
            err = [[n[0] - n[1] for _, n in line], [n[2] - n[0] for _, n in line]]
            axes.errorbar(x, y, yerr=err, marker="o", capsize=4, label=label)
        axes.set_xscale("log", base=2)
        batches = sorted({s["batch"] for s, _ in points})
        axes.set_xticks(batches, [str(b) for b in batches])
        axes.set_xlabel("per-device batch")
        axes.legend()
    else:
        labels = [_label(s, "") for s, _ in points]
        y = [n[0] for _, n in points]
        err = [[n[0] - n[1] for _, n in points], [n[2] - n[0] for _, n in points]]
        axes.bar(range(len(y)), y, yerr=err, capsize=4)
        axes.set_xticks(range(len(y)), labels, rotation=20, ha="right", fontsize=8)
    axes.set_ylabel(ylabel)
    axes.set_title(f"{ylabel} — median, bars min-max")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    path = sweep_dir / name
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _plot_busbw_by_size(sweep_dir: Path, configs: list) -> Path | None:
    figure, axes = plt.subplots(figsize=(7, 4.2))
    drawn = False
    for config in configs:
        job = next((j for j in config.jobs if j.get("collectives")), None)
        if job is None:
            continue
        rows = [r for r in job["collectives"] if r["op"] == "all_reduce"]
        axes.plot([r["bytes"] for r in rows], [r["busbw_gbps"] for r in rows], marker=".",
                  label=_label(dict(config.settings), ""))  # fmt: skip
        drawn = True
    if not drawn:
        plt.close(figure)
        return None
    axes.set_xscale("log", base=2)
    axes.set_xlabel("message bytes")
    axes.set_ylabel("all_reduce busbw (GB/s)")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    figure.tight_layout()
    path = sweep_dir / "busbw_vs_size.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_sweep(sweep_dir: Path, configs: list) -> list[Path]:
    """Write the plots that the sweep's data supports; returns their paths."""
    made = [_plot_metric(sweep_dir, configs, key) for key in PLOTS]
    made.append(_plot_busbw_by_size(sweep_dir, configs))
    return [p for p in made if p is not None]
