"""The runtime classes a job's options name, imported and checked once, in the launching
process: the launcher hands :func:`runtime_of` to :func:`linkbench.config.plan.make_plan`,
whose plan carries them to every rank (:attr:`linkbench.config.plan.JobPlan.runtime`)."""

from __future__ import annotations

from linkbench.config.runtime import Runtime
from linkbench.config.schema import Config
from linkbench.parts.datasets import data_class
from linkbench.parts.strategy import strategy_class
from linkbench.worker.task import task_class


def runtime_of(config: Config) -> Runtime:
    """The :class:`~linkbench.worker.task.Task`, :class:`~linkbench.parts.strategy.Parallel`
    and :class:`~linkbench.parts.datasets.DataSource` subclasses ``config.task._target_``,
    ``config.strategy._target_`` and ``config.data._target_`` name (a ConfigError, one
    sentence naming the key, when one cannot be imported or is no such subclass)."""
    return Runtime(
        task=task_class(config.task._target_),
        strategy=strategy_class(config.strategy),
        data=data_class(config.data),
    )
