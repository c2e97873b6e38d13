"""A job's command-line overrides, read with Hydra's own parser (``OverridesParser``), in one
place: which keys they set, and the settings a job's record keeps (``result.json``'s
``settings``, which the sweep summary groups jobs by)."""

from __future__ import annotations

from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override

# Keys that say how to run a job, not what it measures: left out of its settings.
NOT_SETTINGS = ("resume", "experiment")


def parse(overrides: list[str]) -> list[Override]:
    """``overrides`` parsed as Hydra parses the command line."""
    return OverridesParser.create().parse_overrides(list(overrides))


def key(override: Override) -> str:
    """The key an override sets, without its ``+``/``++``/``~`` and package."""
    return override.key_or_group


def sets(overrides: list[str], name: str) -> bool:
    """Whether ``overrides`` set ``name``."""
    return any(key(o) == name for o in parse(overrides))


def _value(override: Override) -> Any:
    value = override.value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return value
    return override.get_value_element_as_str()


def settings(overrides: list[str]) -> dict[str, Any]:
    """key -> value of what a job's overrides set (numbers as numbers, everything else as
    the text YAML spells it), leaving out ``hydra.*``, deletions and :data:`NOT_SETTINGS`."""
    return {
        key(o): _value(o)
        for o in parse(overrides)
        if not o.is_delete() and not key(o).startswith("hydra.") and key(o) not in NOT_SETTINGS
    }
