"""``hydra/sweeper=rounds``: Hydra's basic sweeper with a sweep's ``repeats`` run as
interleaved rounds (:mod:`linkbench.launcher.sweeper`). Hydra accepts sweepers only from
its ``hydra_plugins`` package, hence this module."""

from __future__ import annotations

from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.types import Override

from linkbench.launcher.sweeper import alternate_rounds, round_sweep, sweep_rounds


class RoundsSweeper(BasicSweeper):
    """Hydra's basic sweeper, with the sweep's repeats run as interleaved rounds."""

    rounds = 1

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None
        self.rounds = sweep_rounds(self.config, arguments)
        return super().sweep(arguments)

    def _parse_config(self) -> list[str]:
        return round_sweep(self.rounds) + super()._parse_config()

    def split_arguments(  # type: ignore[override]
        self, overrides: list[Override], max_batch_size: int | None
    ) -> list[list[list[str]]]:
        batches = BasicSweeper.split_arguments(overrides, max_batch_size)
        jobs = alternate_rounds([job for batch in batches for job in batch], self.rounds)
        return list(BasicSweeper.split_overrides_to_chunks(jobs, max_batch_size))
