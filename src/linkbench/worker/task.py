"""What a job measures, at run time (``task/``): one :class:`Task` subclass per task, named
by its option's ``task._target_``. A built-in task's option (:mod:`linkbench.config.tasks`)
says what the plan asks (its keys, checks, headline and metrics); this class, which only
the worker and the record import, what the processes do:

- :meth:`Task.run` (every worker rank): the measurement; rank 0 returns ``{"metrics": ...}``
  and any other fields for ``result.json``;
- :meth:`Task.finish` (the launching process, in the record): what it adds to ``result.json``
  once every run is in;
- :meth:`Task.report` (the launching process): its console lines.

A task from outside the package has no option of its own: its class says the rest itself
(``headline``, ``metrics``, ``trains`` and :meth:`Task.check`, read by the plan through
:meth:`linkbench.config.schema.TaskConfig.spec`), so it is one module and one YAML file.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from linkbench.config.schema import Config, note_untrained
from linkbench.config.targets import subclass_named
from linkbench.files import RESULT_FILE
from linkbench.metrics import Metric, register
from linkbench.result import JobResult

if TYPE_CHECKING:
    from linkbench.config.plan import JobPlan, RunPlan
    from linkbench.parts.rank import Rank
    from linkbench.worker.board import Board

log = logging.getLogger("linkbench")


class Task:
    """One task; its methods are class methods, so every process can use them unbuilt."""

    # What an outside task says itself (a built-in one's option says it: config/tasks.py).
    headline: ClassVar[str] = ""
    """The key of ``result.json``'s ``metrics`` a sweep judges the task by."""
    metrics: ClassVar[tuple[Metric, ...]] = ()
    """Table entries for metrics :mod:`linkbench.metrics` does not know yet: they join the
    table of every process that defines the class (:meth:`__init_subclass__`)."""
    trains: ClassVar[bool] = False
    """Whether the job trains a model (data, budget, held-out checks and FLOPs apply)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A task's own metrics join this process's table as its class is defined: in the
        launcher that plans it and in every worker that unpickles the plan alike, so a
        worker logs its ``live`` series and the record its ``final/*`` scalars."""
        super().__init_subclass__(**kwargs)
        register(cls.metrics)

    @classmethod
    def check(cls, config: Config, device_type: str, notes: list[str]) -> None:
        """An outside task's refusals (a ConfigError: one sentence naming the key and the
        fix) or notes for ``config`` on a machine of ``device_type`` ("cuda" or "cpu")."""
        note_untrained(cls.trains, config, notes)

    @classmethod
    def run(cls, plan: RunPlan, me: Rank, board: Board | None) -> dict[str, Any]:
        """The measurement on this rank; rank 0 (``board`` given) returns its fields."""
        raise NotImplementedError

    @classmethod
    def finish(cls, fields: JobResult, plan: JobPlan, hardware: dict[str, Any]) -> None:
        """Add to ``result.json``'s ``fields`` once every run is in, given the job's
        ``hardware.json`` (nothing by default)."""

    @classmethod
    def report(cls, result: JobResult) -> None:
        """Log the job's outcome (by default its headline and where ``result.json`` is)."""
        headline = result["headline"]
        value = result["metrics"].get(headline, float("nan"))
        log.info("done: %s %.4g -> %s", headline, value, Path(result["job_dir"]) / RESULT_FILE)


def task_class(target: str) -> type[Task]:
    """The runtime :class:`Task` subclass ``task._target_`` names (importing it added its
    own metrics to this process's table)."""
    return subclass_named("task._target_", target, Task, has="run")
