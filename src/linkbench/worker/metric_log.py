"""Rank 0's metrics as the job goes, one place from the step to where they are shown.

A value is logged by its name in the metric table (:mod:`linkbench.metrics`), and each
backend shows it its own way: TensorBoard as the metric's ``live`` series, the console as the
progress line of a training step. A name the table has no ``live`` series for is refused, so
no series is written past the table (the final record, result.json and its ``final/*``
scalars, is the launcher's: :mod:`linkbench.launcher.record`, :mod:`.hparams`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Protocol

from linkbench.metrics import Metric, metric
from linkbench.worker.board import Board

log = logging.getLogger("linkbench")


class Backend(Protocol):
    """Where logged metrics go."""

    def log(self, step: int, values: Mapping[Metric, float]) -> None: ...


class TensorBoardBackend:
    """Each metric as its ``live`` series of the job's TensorBoard run."""

    def __init__(self, board: Board) -> None:
        self.board = board

    def log(self, step: int, values: Mapping[Metric, float]) -> None:
        self.board.scalars(step, {m.live: v for m, v in values.items() if m.live})


class ConsoleBackend:
    """A training step's progress line: its loss and learning rate, and once steps are
    timed, its throughput and step time."""

    SHOWN = (
        ("lr", "lr {:.4g}"),
        ("samples_per_sec", "{:,.1f} samples/s"),
        ("step_time_ms", "{:.2f} ms/step"),
    )

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def log(self, step: int, values: Mapping[Metric, float]) -> None:
        named = {m.name: v for m, v in values.items()}
        if "loss" not in named:
            return  # not a training step's values
        line = f"step {step}/{self.steps}  loss {named['loss']:.4f}"
        for name, shown in self.SHOWN:
            if name in named:
                line += "  " + shown.format(named[name])
        log.info(line)


class MetricLog:
    """Rank 0's live metrics, handed to every backend."""

    def __init__(self, backends: Sequence[Backend]) -> None:
        self.backends = tuple(backends)

    @classmethod
    def of(cls, board: Board, steps: int | None = None) -> MetricLog:
        """TensorBoard, and with ``steps`` (a training run's) the console's progress line."""
        backends: list[Backend] = [TensorBoardBackend(board)]
        if steps is not None:
            backends.append(ConsoleBackend(steps))
        return cls(backends)

    def log(self, step: int, values: Mapping[str, float]) -> None:
        """Log ``values`` (metric name -> value) at ``step``."""
        found = {}
        for name, value in values.items():
            m = metric(name)
            if m is None or m.live is None:
                raise KeyError(
                    f"{name} has no live series in linkbench.metrics' table; add it there "
                    "(with its unit and live tag) to log it"
                )
            found[m] = float(value)
        for backend in self.backends:
            backend.log(step, found)
