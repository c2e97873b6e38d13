"""``hydra/sweeper=rounds``: Hydra's basic sweeper with a sweep's ``repeats`` run as
interleaved rounds (:mod:`linkbench.launcher.sweeper`). Hydra accepts sweepers only from
its ``hydra_plugins`` package, hence this module."""

from __future__ import annotations

from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

from linkbench.launcher.sweeper import round_sweep, sweep_rounds


class RoundsSweeper(BasicSweeper):
    """Hydra's basic sweeper, with the sweep's repeats run as interleaved rounds."""

    rounds = 1

    def sweep(self, arguments: list[str]) -> Any:
        assert self.config is not None
        self.rounds = sweep_rounds(self.config, arguments)
        return super().sweep(arguments)

    def _parse_config(self) -> list[str]:
        return round_sweep(self.rounds) + super()._parse_config()
