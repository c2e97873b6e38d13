"""Settings given in their old places, moved to where they now live, with a note each: DDP's
``ddp.*`` keys onto the strategy (``strategy.bucket_cap_mb``, ...), and the top-level
``comm_hook`` group onto the strategy's own ``strategy/comm_hook``. A strategy that has no
such setting refuses it in one sentence. The plan calls :func:`moved_settings` first, so
every check after it sees each setting in one place."""

from __future__ import annotations

import dataclasses
from typing import Any

from linkbench.config.checks import require
from linkbench.config.groups import DDPConfig
from linkbench.config.schema import Config

OLD_PLACES = ("ddp", "comm_hook")
"""The config's keys that are only old places: empty once :func:`moved_settings` ran, so a
record of the config (rerun.yaml, TensorBoard's config text) leaves them out, and a
rerun.yaml says each setting once."""


def moved_settings(config: Config, notes: list[str]) -> Config:
    """``config`` with every setting given in an old place moved to its own (notes added)."""
    return _comm_hook(_ddp_settings(config, notes), notes)


def _ddp_settings(config: Config, notes: list[str]) -> Config:
    """``ddp.*`` (the old place of DDP's settings) moved onto the strategy that has them
    (``ddp``, ``zero1``), with a note; refused for a strategy that has none."""
    given = config.ddp.given()
    if not given:
        return config
    strategy = config.strategy
    own = {f.name for f in dataclasses.fields(strategy)}
    shown = {k: str(v).lower() if isinstance(v, bool) else v for k, v in given.items()}
    for key, value in shown.items():
        require(
            key in own,
            f"ddp.{key}={value} sets DistributedDataParallel, which strategy={strategy.name} "
            "does not use; drop it, or use strategy=ddp.",
        )
    notes.append(
        f"{', '.join(f'ddp.{k}' for k in given)} is the old place of strategy={strategy.name}'s "
        f"settings; write {' '.join(f'strategy.{k}={v}' for k, v in shown.items())}."
    )
    # Moved: replacing the config must not move them again.
    moved = dataclasses.replace(strategy, **given)
    return dataclasses.replace(config, strategy=moved, ddp=DDPConfig())


def _comm_hook(config: Config, notes: list[str]) -> Config:
    """``comm_hook=...`` (the old place of DDP's communication hook) moved onto the strategy
    whose group it now is (``strategy/comm_hook``), with a note; ``comm_hook=none`` dropped.
    A strategy without it refuses it (:meth:`~linkbench.config.schema.StrategyConfig.check`)."""
    old, own = config.comm_hook, config.strategy.hook()
    if old is None or old.hook is None:
        return dataclasses.replace(config, comm_hook=None)
    if own is None:
        return config
    require(
        own.hook is None or own == old,
        f"comm_hook={old.name} and strategy/comm_hook={own.name} both set DDP's communication "
        f"hook; drop comm_hook={old.name}, its old place.",
    )
    notes.append(
        f"comm_hook={old.name} is the old place of DDP's communication hook; write "
        f"strategy/comm_hook={old.name}."
    )
    strategy: Any = config.strategy  # it has a hook, so the comm_hook field that holds it
    moved = dataclasses.replace(strategy, comm_hook=old)
    return dataclasses.replace(config, strategy=moved, comm_hook=None)
