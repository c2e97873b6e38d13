"""The link matrix's bookkeeping on known numbers (the copies themselves need a GPU:
tests/test_gpu.py), and the refusal on CPU."""

from __future__ import annotations

import pytest

from linkbench.analysis.plots import plot_link_matrices
from linkbench.config.machine import Machine
from linkbench.errors import ConfigError
from linkbench.launcher.planning import plan_job
from linkbench.worker.links import format_table, matrix, slow_pairs


def rows(p2p: dict[tuple[int, int], float]) -> list[dict]:
    out = [{"kind": "h2d", "src": -1, "dst": g, "size_mb": 256, "gb_s": 50.0} for g in range(4)]
    out += [
        {"kind": "p2p", "src": i, "dst": j, "size_mb": 256, "gb_s": v} for (i, j), v in p2p.items()
    ]
    out += [{"kind": "p2p", "src": i, "dst": j, "size_mb": 1, "gb_s": 1.0} for (i, j) in p2p]
    return out


def test_the_matrix_holds_the_largest_size_and_a_slow_pair_is_flagged(tmp_path):
    speeds = {(i, j): 370.0 for i in range(4) for j in range(4) if i != j}
    speeds[2, 3] = 40.0  # one pair on a degraded link
    measured = rows(speeds)
    grid = matrix(measured, "p2p")
    assert grid[0][1] == 370.0 and grid[2][3] == 40.0 and grid[1][1] is None
    flagged = slow_pairs(measured)
    assert len(flagged) == 1 and flagged[0].startswith("GPU 2 -> GPU 3: 40.0 GB/s")
    assert slow_pairs(rows({k: 370.0 for k in speeds})) == []
    assert "h2d  host     0      50.0" in format_table(measured)
    [heatmap] = plot_link_matrices(tmp_path, {"p2p": grid})
    assert heatmap.name == "links_p2p.png" and heatmap.stat().st_size > 5_000


def test_links_needs_a_gpu(compose_config, tmp_path):
    with pytest.raises(ConfigError, match="task=links measures copies between GPUs"):
        plan_job(compose_config(["task=links"]), str(tmp_path), [], Machine(0))
    plan = plan_job(compose_config(["task=links"]), str(tmp_path), [], Machine(1))
    assert plan.config.task.sizes_mb == [1, 16, 256]
