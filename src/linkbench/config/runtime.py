"""What the plan takes from the launching process that it cannot work out without torch or
the workers' modules, each handed in by the launcher as a function (the config layer imports
neither): the runtime classes its task, strategy and data options name (:data:`RuntimeOf`), and
what building a training job's parts tells (:data:`PartsCheck`).

The plan resolves the runtime classes once and carries them (:class:`Runtime`, as
torchtitan's ``get_train_spec`` is resolved once and handed on): every process, the workers
and the launcher's record alike, calls them from the plan, and nothing after
:func:`~linkbench.config.plan.make_plan` looks a part up by its name
(``tests/test_architecture.py`` fails if something does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from linkbench.config.schema import Config
from linkbench.result import JobResult


class TaskRuntime(Protocol):
    """What the launcher and the workers call on a task's runtime class (a
    ``linkbench.worker.task.Task`` subclass; its methods are class methods). ``plan`` is the
    job's :class:`~linkbench.config.plan.JobPlan`, which carries this class: naming its type
    here would tie the two modules in a circle."""

    @classmethod
    def run(cls, plan: Any, me: Any, board: Any) -> dict[str, Any]: ...

    @classmethod
    def finish(cls, fields: JobResult, plan: Any, hardware: dict[str, Any]) -> None: ...

    @classmethod
    def report(cls, result: JobResult) -> None: ...


@dataclass(frozen=True)
class Runtime:
    """The runtime classes of a job's task and strategy, imported and checked once."""

    task: type[TaskRuntime]
    """``task._target_``: a ``linkbench.worker.task.Task`` subclass."""
    strategy: type
    """``strategy._target_``: a ``linkbench.parts.strategy.Parallel`` subclass."""
    data: Any
    """``data._target_``: a ``linkbench.parts.datasets.DataSource`` subclass."""


RuntimeOf = Callable[[Config], Runtime]
"""Imports and checks the runtime classes a config's task, strategy and data name (one sentence
naming the key when one cannot be used); the launcher hands in
:func:`linkbench.worker.runtime.runtime_of`."""


@dataclass(frozen=True)
class PartsFacts:
    """What building a training job's parts told the plan."""

    flops_per_sample: int
    memory_bytes_per_rank: int
    """A rough estimate of what one rank holds at the job's batch (weights, gradients,
    optimizer state, activations: :mod:`linkbench.parts.memory`)."""
    fixed_memory_bytes: int
    """Of which the part that does not grow with the batch."""


PartsCheck = Callable[[Config, float], PartsFacts]
"""Builds a training job's parts where that is cheap (at the learning rate given) and refuses
what cannot build; returns what that told (:class:`PartsFacts`). It needs torch, so the
launcher hands it in (:func:`linkbench.launcher.parts_check.check_parts`)."""
