"""What a job measures (``task/``): one :class:`Task` subclass per task, named by
``task._target_``, so a task (one from outside the package too) is one module and one YAML file.

A task's class owns every place it differs from another, and each method says which process
runs it:

- :meth:`Task.check` (the launching process, in the plan): what it refuses in the config;
- :meth:`Task.run` (every worker rank): the measurement; rank 0 returns ``{"metrics": ...}``
  and any other fields for ``result.json``;
- :meth:`Task.finish` (the launching process, in the record): what it adds to ``result.json``
  once every run is in;
- :meth:`Task.report` (the launching process): its console lines;
- ``headline``: the metric ``run.py`` returns to Hydra's sweepers and the sweep judges it by,
  recorded in ``result.json`` for the analysis; ``metrics``: entries of its own for the table
  of :mod:`linkbench.metrics` (recorded too, so the analysis reads them without this module).

Training is a task too (:class:`linkbench.worker.train.Train`); ``trains`` says that the
plan's data, epoch-budget and held-out checks and the model's FLOPs apply.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from linkbench.config.schema import Config, require
from linkbench.config.targets import import_class
from linkbench.files import RESULT_FILE
from linkbench.metrics import Metric, register

if TYPE_CHECKING:
    from linkbench.config.plan import JobPlan
    from linkbench.parts.rank import Rank
    from linkbench.worker.board import Board

log = logging.getLogger("linkbench")


class Task:
    """One task; its methods are class methods, so every process can use them unbuilt."""

    headline: ClassVar[str]
    """The key of ``result.json``'s ``metrics`` a sweep judges the task by."""
    metrics: ClassVar[tuple[Metric, ...]] = ()
    """Table entries for metrics :mod:`linkbench.metrics` does not know yet."""
    trains: ClassVar[bool] = False
    """Whether the job trains a model (data, budget, held-out checks and FLOPs apply)."""

    @classmethod
    def check(cls, config: Config, device_type: str, notes: list[str]) -> None:
        """Refuse (a ConfigError: one sentence naming the key and the fix) or note what
        this task does with ``config`` on a machine of ``device_type`` ("cuda" or "cpu")."""
        if not cls.trains and (config.compile or config.cuda_graphs):
            notes.append(
                f"compile and cuda_graphs apply to task=train, not task={config.task.name}."
            )

    @classmethod
    def run(cls, plan: JobPlan, me: Rank, board: Board | None) -> dict[str, Any]:
        """The measurement on this rank; rank 0 (``board`` given) returns its fields."""
        raise NotImplementedError

    @classmethod
    def finish(cls, fields: dict[str, Any], plan: JobPlan, hardware: dict[str, Any]) -> None:
        """Add to ``result.json``'s ``fields`` once every run is in, given the job's
        ``hardware.json`` (nothing by default)."""

    @classmethod
    def report(cls, result: dict[str, Any]) -> None:
        """Log the job's outcome (by default its headline and where ``result.json`` is)."""
        value = result["metrics"].get(cls.headline, float("nan"))
        log.info("done: %s %.4g -> %s", cls.headline, value, Path(result["job_dir"]) / RESULT_FILE)


def task_class(target: str) -> type[Task]:
    """The :class:`Task` subclass ``task._target_`` names, its own metrics added to this
    process's table."""
    cls = import_class("task._target_", target, "linkbench.worker.task.Task", has="headline")
    require(
        issubclass(cls, Task),
        f"task._target_={target} is not a linkbench.worker.task.Task subclass; name one.",
    )
    register(cls.metrics)
    return cls
