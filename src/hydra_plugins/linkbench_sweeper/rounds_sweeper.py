"""``hydra/sweeper=rounds``: Hydra's basic sweeper with a sweep's ``repeats`` run as
interleaved rounds (:mod:`linkbench.launcher.sweeper`). Hydra accepts sweepers only from
its ``hydra_plugins`` package, hence this module.

Hydra's own ``split_arguments`` (a static method) makes the jobs; the rounds are put in
order (every odd round reversed) when the first batch is taken. A launcher that runs the
jobs of a batch at the same time (joblib) is refused, since rounds running together on the
same devices measure each other; with ``hydra.sweeper.concurrent_jobs=true`` it runs, one
round per batch, so rounds at least never overlap.

Like Hydra's own plugins, the module stores its config (``hydra/sweeper=rounds``) when Hydra
imports it to look for plugins, so the sweeper is there for any Hydra app, run.py or not."""

# No `from __future__ import annotations`: Hydra imports plugins outside sys.modules, where
# dataclasses cannot resolve string annotations.
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore

from linkbench.launcher.sweeper import alternate_rounds, check_rounds, round_sweep, sweep_rounds


@dataclass
class RoundsSweeperConf:
    """``hydra/sweeper=rounds``: the basic sweeper's options and ``concurrent_jobs``."""

    _target_: str = "hydra_plugins.linkbench_sweeper.rounds_sweeper.RoundsSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None
    concurrent_jobs: bool = False
    """Let a launcher that runs a batch's jobs at the same time (joblib) run the sweep, one
    round per batch."""


ConfigStore.instance().store(
    group="hydra/sweeper", name="rounds", node=RoundsSweeperConf, provider="linkbench"
)


class RoundsSweeper(BasicSweeper):
    """Hydra's basic sweeper, with the sweep's repeats run as interleaved rounds."""

    rounds = 1

    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, str] | None = None,
        concurrent_jobs: bool = False,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.concurrent_jobs = concurrent_jobs
        self._ordered = False

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None
        self.rounds = sweep_rounds(self.config, arguments)
        check_rounds(self.config, self.rounds, self.concurrent_jobs)
        self._ordered = False
        return super().sweep(arguments)

    def _parse_config(self) -> list[str]:
        return round_sweep(self.rounds) + super()._parse_config()

    def get_job_batch(self) -> Sequence[Sequence[str]]:
        if not self._ordered:
            assert self.overrides is not None
            jobs = alternate_rounds([list(j) for b in self.overrides for j in b], self.rounds)
            size = len(jobs) // self.rounds if self.concurrent_jobs else self.max_batch_size
            self.overrides = list(BasicSweeper.split_overrides_to_chunks(jobs, size))
            self._ordered = True
        return super().get_job_batch()
