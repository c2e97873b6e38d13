"""Rank 0's live metrics go through one place: the metric table names each series, the
metrics log hands values to TensorBoard and the console, and no worker module writes a
series of its own past the table."""

from __future__ import annotations

import ast
import logging

import pytest

from linkbench.metrics import table
from linkbench.worker.metric_log import ConsoleBackend, MetricLog, TensorBoardBackend

from ..conftest import REPO


class _Board:
    def __init__(self) -> None:
        self.logged: list[tuple[int, dict[str, float]]] = []

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.logged.append((step, values))


def test_a_step_is_logged_by_metric_name_to_every_backend(caplog):
    board = _Board()
    log = MetricLog([TensorBoardBackend(board), ConsoleBackend(steps=40)])  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="linkbench"):
        log.log(10, {"lr": 0.1, "loss": 2.5})
        log.log(20, {"lr": 0.05, "loss": 2.25, "samples_per_sec": 1234.5, "step_time_ms": 51.8})
        log.log(20, {"eval_loss": 2.0, "eval_accuracy": 0.5})
    assert board.logged == [
        (10, {"train/lr": 0.1, "train/loss": 2.5}),
        (20, {"train/lr": 0.05, "train/loss": 2.25, "perf/samples_per_sec": 1234.5,
              "perf/step_time_ms": 51.8}),
        (20, {"eval/loss": 2.0, "eval/accuracy": 0.5}),
    ]  # fmt: skip
    assert [r.getMessage() for r in caplog.records] == [
        "step 10/40  loss 2.5000  lr 0.1",
        "step 20/40  loss 2.2500  lr 0.05  1,234.5 samples/s  51.80 ms/step",
    ]


def test_a_name_without_a_live_series_in_the_table_is_refused():
    log = MetricLog([TensorBoardBackend(_Board())])  # type: ignore[arg-type]
    with pytest.raises(KeyError, match="perf/made_up"):
        log.log(1, {"perf/made_up": 1.0})
    with pytest.raises(KeyError, match="epoch_time_s has no live series"):
        log.log(1, {"epoch_time_s": 1.0})  # a result.json metric, not a series


def test_every_live_series_is_named_once():
    live = [m.live for m in table() if m.live]
    assert len(live) == len(set(live))


def test_no_worker_module_writes_a_table_series_past_the_table():
    """Before: train.py and collectives.py wrote "perf/...", "train/..." and "eval/..." tags
    as literals. Series families keyed by what they measure (collectives/<op>/..., links/...,
    hw/rank<N>/...) are the tasks' own; a table metric's series is written by its name."""
    heads = ("perf/", "train/", "eval/", "mem/")
    found = []
    for path in sorted((REPO / "src" / "linkbench" / "worker").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and text.startswith(heads) and "\n" not in text:
                found.append(f"{path.name}: {text}")
    assert found == []
