"""A job's command-line overrides, read with Hydra's own parser (``OverridesParser``), in one
place: which keys they set, and the settings a job's record keeps (``result.json``'s
``settings``, which the sweep summary groups jobs by)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import IntervalSweep, Override
from hydra.core.plugins import Plugins
from hydra.errors import HydraException

from linkbench.errors import ConfigError

# Keys that say how to run a job, not what it measures: left out of its settings.
NOT_SETTINGS = ("resume", "experiment")
# Config groups that are added with +, not set (conf/config.yaml has no default for them).
ADDED_GROUPS = ("experiment",)


def parse(overrides: list[str]) -> list[Override]:
    """``overrides`` parsed as Hydra parses the command line."""
    return OverridesParser.create().parse_overrides(list(overrides))


def key(override: Override) -> str:
    """The key an override sets, without its ``+``/``++``/``~`` and package."""
    return override.key_or_group


def sets(overrides: list[str], name: str) -> bool:
    """Whether ``overrides`` set ``name``."""
    return any(key(o) == name for o in parse(overrides))


def sweep_values(override: Override) -> list[str]:
    """The values an override sweeps, as Hydra's basic sweeper expands them (one for an
    override that sweeps nothing; none for an empty range, which the sweep's own check
    refuses); a sweep it cannot enumerate is refused in one sentence (ConfigError) instead
    of Hydra's traceback."""
    if not override.is_sweep_override():
        return [override.get_value_element_as_str()]
    name = key(override)
    text = override.input_line or name
    if isinstance(interval := override.value(), IntervalSweep):
        low, high = float(interval.start or 0), float(interval.end or 0)
        ends = f"{low:g},{(low + high) / 2:g},{high:g}"
        raise ConfigError(
            f"{text} is a continuous interval, which only a sampling sweeper (Optuna, Ax) "
            f"draws from; list the values to run instead, e.g. {name}={ends}."
        )
    try:
        return list(override.sweep_string_iterator())
    except (ValueError, HydraException) as error:
        raise ConfigError(
            f"{text} cannot be expanded ({error}); write range(start, stop, step) with a step "
            f"that is not 0, or list the values, e.g. {name}=8,16,32."
        ) from None


def _value(override: Override) -> Any:
    value = override.value()
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return value
    return override.get_value_element_as_str()


def _settings(parsed: list[Override]) -> dict[str, Any]:
    return {
        key(o): _value(o)
        for o in parsed
        if not o.is_delete() and not key(o).startswith("hydra.") and key(o) not in NOT_SETTINGS
    }


def settings(overrides: list[str]) -> dict[str, Any]:
    """key -> value of what ``overrides`` set (numbers as numbers, everything else as the
    text YAML spells it), leaving out ``hydra.*``, deletions and :data:`NOT_SETTINGS`."""
    return _settings(parse(overrides))


@dataclass(frozen=True)
class JobOverrides:
    """A job's command-line overrides, parsed once (when the job starts) and carried by its
    plan and its record: the texts it records (without ``resume``, which says how to run it,
    so a resumed job records what the killed one did), what they set (:func:`settings`), and
    the values they give, as Hydra parses them (deletions left out)."""

    texts: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, overrides: Sequence[str] | JobOverrides) -> JobOverrides:
        """``overrides`` parsed (or as they are, when already parsed)."""
        if isinstance(overrides, JobOverrides):
            return overrides
        parsed = parse(list(overrides))
        kept = [(text, o) for text, o in zip(overrides, parsed, strict=True) if key(o) != "resume"]
        return cls(
            tuple(text for text, _ in kept),
            _settings(parsed),
            {key(o): o.value() for _, o in kept if not o.is_delete()},
        )


def _kinds(kind: Any) -> list[Any]:
    """The types a field may hold (``X | None`` holds X and None)."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return [k for k in typing.get_args(kind) if k is not type(None)]
    return [kind]


def _schema_fields(schema: type, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every dotted key of a config dataclass with its type hint, the keys of every option
    of a group (task=...) included."""
    hints = typing.get_type_hints(schema)
    for each in dataclasses.fields(schema):
        name, hint = prefix + each.name, hints.get(each.name)
        yield name, hint
        for kind in _kinds(hint):
            if dataclasses.is_dataclass(kind) and isinstance(kind, type):
                for option in (kind, *_subclasses(kind)):
                    yield from _schema_fields(option, name + ".")


def _schema_keys(schema: type) -> dict[str, bool]:
    """Every dotted key of a config dataclass -> whether anything may follow it (a dict or
    an untyped field)."""
    return {
        name: any(k is Any or typing.get_origin(k) is dict or k is dict for k in _kinds(hint))
        for name, hint in _schema_fields(schema)
    }


def _bool_keys(schema: type) -> dict[str, bool]:
    """Every dotted key of a config dataclass that holds true or false -> whether it may
    also be null."""
    return {
        name: type(None) in typing.get_args(hint)
        for name, hint in _schema_fields(schema)
        if _kinds(hint) == [bool]
    }


def _subclasses(kind: type) -> list[type]:
    """Every subclass of ``kind``, at any depth."""
    found: list[type] = []
    sub: type
    for sub in kind.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _unknown_key(parsed: list[Override], keys: dict[str, bool], schema: type) -> str | None:
    """One sentence for the first override that sets a key the config schema lacks
    (``keys``: :func:`_schema_keys`), with the nearest keys it has ("did you mean steps?");
    None when every key is known. Keys added with ``+``, Hydra's own and config groups'
    paths (``hydra/launcher``) are left to Hydra."""
    for override in parsed:
        name = key(override)
        if override.is_add() or override.is_force_add() or "/" in name:
            continue
        if name in ADDED_GROUPS:
            return f"{name} is a group added to the config, not a key of it: write +{name}=..."
        if name.split(".")[0] == "hydra" or name in keys:
            continue
        parts = name.split(".")
        if any(keys.get(".".join(parts[:i])) for i in range(1, len(parts))):
            continue  # inside a dict such as model.kwargs
        return f"{name} is not a key of linkbench's config; {key_hint(name, schema)}"
    return None


def argument_problem(arguments: list[str], schema: type, groups: set[str]) -> str | None:
    """One sentence for the first command-line override that cannot mean what it says, or
    None: a key the schema lacks (:func:`_unknown_key`); a key given twice where one of them
    sweeps (Hydra keeps the last, silently dropping the other's values); a key of the
    schema deleted (``~steps``); a true/false key given anything else (OmegaConf reads
    ``eval.enabled=2`` as true); a list given to a config group of ``groups`` (Hydra
    merges the options listed into one, or fails inside itself) or to a key that holds
    keys (``eval=[1]``). The options of other installed packages count: Hydra's plugin
    scan, which every run makes anyway, imports their ``hydra_plugins`` modules, which
    store them."""
    try:
        parsed = parse(arguments)
    except HydraException:
        return None  # Hydra says what is wrong with the syntax itself
    Plugins.instance()  # an outside option's dataclass, stored before its keys are read
    keys, flags = _schema_keys(schema), _bool_keys(schema)
    if problem := _unknown_key(parsed, keys, schema):
        return problem
    seen: dict[str, Override] = {}
    for override in parsed:
        name = key(override)
        text = override.input_line or name
        if problem := _list_problem(override, name, text, keys, groups):
            return problem
        if override.is_delete() and name in keys:
            return (
                f"{text} deletes {name}, which every job reads; set it instead ({name}=...), "
                "to null where the key allows it."
            )
        if name in flags and not override.is_delete():
            words = BOOL_WORDS if flags[name] else BOOL_WORDS[:2]
            wrong = [v for v in sweep_values(override) if v.lower() not in words]
            if wrong:
                return (
                    f"{text}: {name} is {' or '.join(words)}, not {wrong[0]}; write "
                    f"{name}=true or {name}=false."
                )
        if (first := seen.get(name)) is not None and (
            first.is_sweep_override() or override.is_sweep_override()
        ):
            both = f"{first.input_line} and {text}"
            every = ",".join(dict.fromkeys([*sweep_values(first), *sweep_values(override)]))
            return (
                f"{name} is given twice ({both}); Hydra would keep only the last and drop the "
                f"other's values: give it once, with every value, e.g. {name}={every}."
            )
        seen[name] = override
    return None


BOOL_WORDS = ("true", "false", "null")


def _list_problem(
    override: Override, name: str, text: str, keys: dict[str, bool], groups: set[str]
) -> str | None:
    """Why a list given to a group or to a key that holds keys cannot mean what it says."""
    if override.is_delete() or override.is_sweep_override():
        return None
    value = override.value()
    if not isinstance(value, list):
        return None
    listed = ",".join(str(v) for v in value)
    if name in groups:
        one = f"a job takes one option of it: write {name}={value[0] if value else 'NAME'}"
        sweep = f"; to compare them, sweep them: -m {name}={listed}" if len(value) > 1 else ""
        return f"{text} gives the group {name} a list; {one}{sweep}."
    inside = sorted(
        {k.removeprefix(f"{name}.").split(".")[0] for k in keys if k.startswith(f"{name}.")}
    )
    if inside:
        return (
            f"{text} gives {name} a list, and {name} holds keys ({', '.join(inside)}); set them "
            f"one at a time, e.g. {name}.{inside[0]}=..."
        )
    return None


def key_hint(name: str, schema: type) -> str:
    """The nearest keys ``schema`` has to ``name`` ("did you mean steps?"), or where the keys
    are listed."""
    near = difflib.get_close_matches(name, list(_schema_keys(schema)), n=3, cutoff=0.6)
    return f"did you mean {' or '.join(near)}?" if near else "see docs/configuration.md."


def override_texts(node: Any) -> list[str]:
    """The override strings of a Hydra ``overrides`` list node as the user typed them: an
    interpolation in one (``batch=${oops}``) stays text here, for the plan to refuse."""
    from omegaconf import OmegaConf

    return [str(text) for text in OmegaConf.to_container(node, resolve=False) or []]


def command_line_overrides(argv: list[str]) -> list[str]:
    """The overrides of a ``run.py`` command line, as Hydra's own argument parser reads it."""
    from hydra._internal.utils import get_args_parser

    known, _ = get_args_parser().parse_known_args(argv)
    return list(known.overrides or [])
