"""What the plots show a reader: ratio ticks that read as numbers, series that do not hide
each other's error bars, and titles that name the mean they draw."""

from __future__ import annotations

import random
from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from linkbench.analysis import plots
from linkbench.analysis.plots import ratio_ticks
from linkbench.analysis.sweep import group, swept_keys


@pytest.mark.parametrize(("low", "high"), [(0.42, 1.02), (0.98, 1.15), (0.3, 3.5)])
def test_ratio_ticks_are_a_few_plain_numbers_around_1(low, high):
    ticks = ratio_ticks(low, high)
    assert 1.0 in ticks and 3 <= len(ticks) <= 6
    assert low / 1.1 <= ticks[0] <= low * 1.1 and high / 1.1 <= ticks[-1] <= high * 1.1
    assert all(len(f"{t:g}") <= 4 for t in ticks)  # 0.42, 1.1: no powers of ten


def _results() -> list[dict]:
    rng, out = random.Random(2), []
    for r in range(3):
        for batch in (8, 16):
            for arm in ("nvlink", "pcie"):
                value = rng.gauss(0.1, 0.2)  # exposed share: noisy, some below 0
                out.append({
                    "job": f"batch={batch},interconnect={arm},round={r}", "status": "completed",
                    "settings": {"batch": batch, "interconnect": arm, "round": r}, "round": r,
                    "metrics": {"samples_per_sec": 1000.0 * batch, "comm_fraction": value},
                })  # fmt: skip
    return out


def test_two_series_sit_apart_and_an_arithmetic_mean_is_not_called_geometric(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "_save", lambda figure, path: drawn.append(figure) or path)
    results = _results()
    configs = group(results, swept_keys(results))
    plots._plot_metric(Path(tmp_path), configs, "comm_fraction")
    axes = drawn[0].axes[0]
    xs = [tuple(line.get_xdata()) for line in axes.get_lines() if line.get_marker() == "o"]
    assert len(xs) == 2 and xs[0] != xs[1]  # the nvlink and pcie points at each batch apart
    assert "geometric" not in axes.get_title() and ": mean," in axes.get_title()
    plt.close("all")
