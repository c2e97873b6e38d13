"""From a composed config (Hydra's DictConfig, or plain data such as a rerun.yaml) to the
typed :class:`~linkbench.config.schema.Config`, whose fields check their own ranges: unknown
keys and bad values refused in one sentence, ``model=auto`` and ``precision=auto`` followed
to the options that suit the machine, and back to plain data for the records."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, OmegaConfBaseException

from linkbench.config.checks import require
from linkbench.config.data import FORMER_KEYS, DataConfig
from linkbench.config.hydra_errors import sentence
from linkbench.config.links import FORMER_LINK_KEYS
from linkbench.config.machine import Machine
from linkbench.config.overrides import JobOverrides, key_hint
from linkbench.config.registry import AUTO, auto_node, auto_options, options
from linkbench.config.schema import Config, own_target
from linkbench.errors import ConfigError


def typed_to_plain(config: Config) -> dict[str, Any]:
    """A Config as plain YAML-able data (enums as their names)."""
    plain = OmegaConf.to_container(OmegaConf.structured(config), enum_to_str=True)
    assert isinstance(plain, dict)
    return {str(key): value for key, value in plain.items()}


def _unknown_keys(
    node: Any, schema: type, prefix: str = "", chosen: Mapping[str, type] | None = None
) -> list[str]:
    """Keys of ``node`` that ``schema`` (a dataclass; ``chosen``: the option dataclasses of
    its groups) lacks, at any depth (Hydra's ``+key=`` adds keys that a merge into the
    schema would otherwise drop silently)."""
    known = {f.name: f.type for f in dataclasses.fields(schema)}
    hints = {**typing.get_type_hints(schema), **(chosen or {})}
    unknown = []
    for key in node:
        if key not in known:
            unknown.append(f"{prefix}{key}")
        elif dataclasses.is_dataclass(hints[key]) and isinstance(node[key], Mapping):
            unknown += _unknown_keys(node[key], hints[key], f"{prefix}{key}.")
    return unknown


def _options_of(cfg: DictConfig | Mapping[str, Any]) -> dict[str, type]:
    """group -> the option dataclass ``cfg``'s node of that group is: its type where Hydra
    composed it, else the built-in option its name and ``_target_`` name (a plain
    rerun.yaml), else the group's base (an option from outside the package)."""
    chosen = {}
    for group, named in options().items():
        node = cfg.get(group)
        base = typing.get_type_hints(Config)[group]
        if node is None:
            continue
        kind = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
        if isinstance(kind, type) and issubclass(kind, base) and kind is not base:
            chosen[group] = kind
            continue
        option = named.get(str(node.get("name")))
        target = node.get("_target_")
        if option is not None and (target is None or target == own_target(option)):
            chosen[group] = option
        else:
            chosen[group] = base
    return chosen


def _without_former_keys(
    cfg: DictConfig | Mapping[str, Any], chosen: Mapping[str, type]
) -> DictConfig | Mapping[str, Any]:
    """``cfg`` without the keys its data and interconnect options have none of that every
    option of their group had before each had its own (:data:`linkbench.config.data.FORMER_KEYS`,
    :data:`linkbench.config.links.FORMER_LINK_KEYS`): a rerun.yaml written then carries them
    all, and for this option they did nothing (an outside data option keeps its own)."""
    former: dict[str, list[str]] = {}
    for group, keys in (("data", FORMER_KEYS), ("interconnect", FORMER_LINK_KEYS)):
        node, option = cfg.get(group), chosen.get(group)
        if option is None or option is DataConfig or not isinstance(node, Mapping | DictConfig):
            continue
        own = {f.name for f in dataclasses.fields(option)}
        if found := [key for key in keys if key in node and key not in own]:
            former[group] = found
    if not former:
        return cfg
    cfg = copy.deepcopy(cfg)
    for group, dropped in former.items():
        node = cfg[group]
        with open_dict(node) if isinstance(node, DictConfig) else contextlib.nullcontext():
            for key in dropped:
                del node[key]
    return cfg


def to_config(cfg: DictConfig | Mapping[str, Any]) -> Config:
    """The typed config; its fields check their ranges here (ConfigError on bad input).

    A config composed by run.py is typed already; a plain one (a rerun.yaml, a test's dict)
    is merged into the schema first (its task and strategy into their options'
    dataclasses), so its types are checked the same way."""
    chosen = _options_of(cfg)
    cfg = _without_former_keys(cfg, chosen)
    unknown = _unknown_keys(cfg, Config, chosen=chosen)
    require(
        not unknown,
        f"{', '.join(unknown)} is not a key of linkbench's config; "
        + key_hint(unknown[0] if unknown else "", Config),
    )
    try:
        schema = OmegaConf.structured(Config)
        for group, option in chosen.items():
            schema[group] = OmegaConf.structured(option)
        typed = OmegaConf.merge(schema, cfg)
        config = OmegaConf.to_object(typed)
    except MissingMandatoryValue as error:
        group = str(error.full_key).split(".")[0]
        if group not in cfg:  # a primary config of the user's own, without linkbench's defaults
            raise ConfigError(
                f"this config chooses no {group} (its defaults list names no {group} option); "
                f"choose one ({group}=NAME), or keep your settings in an experiment, which "
                "builds on linkbench's config: experiment/NAME.yaml starting with "
                "`# @package _global_`, run with --config-dir and +experiment=NAME."
            ) from None
        raise ConfigError(f"{error.full_key} is not set; add {error.full_key}=VALUE.") from None
    except ConfigKeyError as error:
        raise ConfigError(
            f"{error.full_key} is not a key of linkbench's config; "
            + key_hint(str(error.full_key), Config)
        ) from None
    except OmegaConfBaseException as error:
        raise ConfigError(str(sentence(error))) from None
    assert isinstance(config, Config)
    for key, value in _numbers(config):
        require(
            math.isfinite(value),
            f"{key}={value} is not a finite number; give it a finite value.",
        )
    return config


def _numbers(node: Any, prefix: str = "") -> list[tuple[str, float]]:
    """(key, value) of every float in a config, at any depth."""
    found: list[tuple[str, float]] = []
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            found += _numbers(value, f"{prefix}{f.name}.")
        elif isinstance(value, float):
            found.append((f"{prefix}{f.name}", value))
    return found


def _leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    """dotted key -> value of every leaf of a config node (interpolations unresolved)."""
    if not isinstance(node, dict):
        return {prefix: node}
    found: dict[str, Any] = {}
    for name, value in node.items():
        found.update(_leaves(value, f"{prefix}.{name}" if prefix else str(name)))
    return found


def follow_machine(cfg: DictConfig, overrides: JobOverrides, machine: Machine) -> DictConfig:
    """``cfg`` with ``model=auto`` and ``precision=auto`` as the options that suit
    ``machine`` (:func:`~linkbench.config.registry.auto_options`); ``cfg`` itself where
    neither is auto. A key the user set under the auto option (any value that differs from
    what ``auto`` alone composes to, and any of ``overrides`` under its group) holds for the
    option it stands for."""
    chosen = {
        group: option
        for group, option in auto_options(machine.cuda_devices).items()
        if OmegaConf.select(cfg, f"{group}.name") == AUTO
    }
    if not chosen:
        return cfg
    cfg = copy.deepcopy(cfg)
    for group, option in chosen.items():
        alone = _leaves(OmegaConf.to_container(auto_node(group, AUTO)))
        composed = _leaves(OmegaConf.to_container(cfg[group]))
        user = {k: v for k, v in composed.items() if k not in alone or alone[k] != v}
        user.update(
            {
                name.split(".", 1)[1]: value
                for name, value in overrides.values.items()
                if name.startswith(f"{group}.")
            }
        )
        cfg[group] = auto_node(group, option)
        for name, value in user.items():
            OmegaConf.update(cfg, f"{group}.{name}", value, force_add=True)
    return cfg
