"""Hydra's and OmegaConf's own errors on the user's input, as one sentence each.

Hydra composes the config before linkbench sees it, so a misspelt option (``model=resnet``),
a value of the wrong type (``steps=ten``), an override it cannot parse (``batch==8``), a
missing config or a YAML file that does not parse is Hydra's to find. It reports them with
its option list and search path, or a traceback. :func:`sentence` turns each of those errors,
as Hydra raises it (``MissingConfigException``, ``ConfigCompositionException`` with OmegaConf's
``ValidationError`` or ``ConfigKeyError`` as its cause, ``OverrideParseException``, ...), into
one sentence naming the key and the fix; :func:`install` puts it in front of Hydra's reporting,
so the sentence is all a user sees (exit status 2, as all bad input). Errors it does not know
are left to Hydra as they are.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

import yaml
from hydra.errors import (
    ConfigCompositionException,
    InstantiationException,
    MissingConfigException,
    OverrideParseException,
    SearchPathException,
)
from omegaconf.errors import (
    ConfigAttributeError,
    ConfigKeyError,
    InterpolationResolutionError,
    OmegaConfBaseException,
    ValidationError,
)

from linkbench.errors import ConfigError, refuse

# How OmegaConf names the type a value could not be converted to, as a user reads it.
TYPES = {
    "Integer": "a whole number",
    "Float": "a number",
    "Boolean": "true or false",
    "String": "text",
}


def _near(name: str, choices: Iterable[str]) -> str:
    found = difflib.get_close_matches(name, list(choices), n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(found)}?" if found else "."


def _missing_config(error: MissingConfigException) -> str:
    missing = str(error.missing_cfg_file or "")
    if match := re.search(r"config directory '(.*)' exists", str(error)):
        return (
            f"--config-path {match.group(1)} is not a folder that exists (a relative path is "
            "read from run.py's folder); give it the folder that holds your config, or leave "
            "it out for linkbench's own (conf/)."
        )
    if error.options is None or "/" not in missing:
        return (
            f"--config-name {missing} names no config in the config path (linkbench's own is "
            "config, conf/config.yaml); check --config-name and --config-path/--config-dir."
        )
    group, _, name = missing.rpartition("/")
    options = [str(o) for o in error.options]
    shown = ", ".join(options)
    added = "+" if group == "experiment" else ""
    if not name:
        return f"{added}{group}= names no option; choose one of {shown}."
    what = "a committed experiment" if group == "experiment" else "an option"
    return f"{added}{group}={name} is not {what}; choose one of {shown}" + _near(name, options)


def _nested_groups() -> dict[str, list[str]]:
    """The groups options have of their own (``strategy/comm_hook``) -> the options that
    have each (``strategy=ddp``, ``strategy=zero1``)."""
    from linkbench.config.registry import options

    having: dict[str, list[str]] = {}
    for group, named in options().items():
        for name, option in named.items():
            for own in getattr(option, "groups", {}):
                having.setdefault(f"{group}/{own}", []).append(f"{group}={name}")
    return having


def _not_in_defaults(message: str, arguments: list[str]) -> str | None:
    """Hydra's "Could not override 'G'": a group (``strategy/comm_hook``) that this
    config's choices do not have, as one sentence naming the options that have it."""
    match = re.match(r"(?:In '.*': )?Could not override '([^']+)'", message)
    groups_message = "No match in the defaults list|Did you mean to override"
    if not match or not re.search(groups_message, message):
        return None  # a key, not a group: OmegaConf's error, its cause, says more
    group = match.group(1)
    given = next((a for a in arguments if a.startswith(f"{group}=")), group)
    value = given.partition("=")[2] or "OPTION"
    if having := _nested_groups().get(group):
        parent = group.partition("/")[0]
        chosen = next((a for a in arguments if a.startswith(f"{parent}=")), None)
        which = chosen or f"this config's {parent}"
        return (
            f"{given} is a group of {' and '.join(having)}, and {which} has none; drop it, "
            f"or use {having[0]}."
        )
    return f"{given} names a group this config does not choose from; add it: +{group}={value}."


def _invalid_value(error: ValidationError, override: str | None) -> str:
    key = str(error.full_key or error.key or "the value")
    given = override or f"{key}={error.value}"
    message = str(error.msg or error).splitlines()[0]
    group = key.replace(".", "/")
    if isinstance(error.value, str) and (having := _nested_groups().get(group)):
        return (
            f"{given} sets a group of {' and '.join(having)}, whose option is chosen with a "
            f"/; write {group}={error.value}."
        )
    if match := re.search(r"expected one of \[(.*)\]", message):
        choices = [c.strip() for c in match.group(1).split(",")]
        return f"{given} is not one of {', '.join(choices)}" + _near(str(error.value), choices)
    if match := re.search(r"could not be converted to (\w+)", message):
        wanted = TYPES.get(match.group(1), match.group(1))
        return f"{given} is not {wanted}; give {key} {wanted}."
    if "is not a valid bool" in message:
        return f"{given} is not true or false; give {key}=true or {key}=false."
    return f"{given}: {message.rstrip('.')}; see `python run.py --cfg job` for its type."


def _unknown_key(error: ConfigAttributeError | ConfigKeyError) -> str:
    key = str(error.full_key or error.key or "")
    parent = getattr(error, "parent_node", None)
    known: list[str] = []
    if parent is not None and hasattr(parent, "keys"):
        known = [str(k) for k in parent]
    prefix = key.rpartition(".")[0]
    found = difflib.get_close_matches(str(error.key or key.rpartition(".")[2]), known, n=2)
    dotted = [f"{prefix}.{name}" if prefix else name for name in found]
    near = f"; did you mean {' or '.join(dotted)}?" if dotted else "."
    where = f"under {prefix}" if prefix else "in linkbench's config"
    listing = f"`python run.py --cfg {'hydra' if key.startswith('hydra.') else 'job'}` lists them"
    if (option := _option_named(prefix, parent)) is not None and (
        elsewhere := _not_of_option(key, prefix, option, known, near == ".")
    ):
        return elsewhere
    return f"{key} is not a key {where}" + (near if near != "." else f"; {listing}.")


def _experiment_package(
    error: ConfigAttributeError | ConfigKeyError, arguments: list[str]
) -> str | None:
    """An experiment file without ``# @package _global_``: Hydra puts its keys under
    ``experiment.``, which the schema lacks."""
    if str(error.full_key or error.key or "").split(".")[0] != "experiment":
        return None
    given = next((a for a in arguments if a.lstrip("+").startswith("experiment=")), None)
    name = given.split("=", 1)[1] if given else "NAME"
    return (
        f"{given or '+experiment=NAME'}: experiment/{name}.yaml does not start with "
        "`# @package _global_`, so Hydra puts its keys under experiment. instead of the "
        "config's top; make that its first line, as experiments/experiment/*.yaml do."
    )


def _option_named(group: str, node: Any) -> str | None:
    """The option ``node`` is, where it is the node of a group whose options have keys of
    their own (``data``, ``task``, ``strategy``)."""
    from linkbench.config.registry import options

    if group not in options() or node is None or "name" not in node:
        return None
    return str(node["name"])


def _not_of_option(
    key: str, group: str, option: str, known: list[str], listing: bool
) -> str | None:
    """A key the chosen option of ``group`` lacks: the options that have it, or (with
    ``listing``) the option's own keys; None where neither says more."""
    from linkbench.config.registry import options

    name = key.rpartition(".")[2]
    having = [
        f"{group}={other}"
        for other, cls in options()[group].items()
        if other != option and name in {f.name for f in dataclasses.fields(cls)}
    ]
    if having:
        verb = "has" if len(having) == 1 else "have"
        return f"{key} is not a key of {group}={option}; {' and '.join(having)} {verb} it."
    if not listing:
        return None
    own = ", ".join(k for k in known if k not in ("name", "_target_", "options"))
    return f"{key} is not a key of {group}={option}, whose keys are {own}."


def _bad_override(arguments: list[str]) -> str | None:
    """The first command-line override Hydra's grammar cannot read, in one sentence."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for text in arguments:
        try:
            parser.parse_overrides([text])
        except OverrideParseException as error:
            detail = str(error).splitlines()
            reason = next(
                (line for line in detail if line and not line.startswith(("Error", "See"))),
                "",
            )
            reason = re.sub(r" expecting \{.*\}", "", reason)
            return (
                f"{text} is not an override Hydra can read ({reason}); write key=value, "
                "and quote a value with special characters (key='a,b')."
            )
    return None


def _ambiguous(message: str) -> str | None:
    match = re.match(r"Ambiguous value for argument '(.*)'", message)
    if not match:
        return None
    text = match.group(1)
    name, _, values = text.partition("=")
    return (
        f"{text} names several values, which only a sweep runs: add -m (python run.py -m "
        f"{text}), or write {name}=[{values}] for a list."
    )


def _yaml(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a file"
    problem = error.problem or error.context or "it does not parse"
    return f"{where} is not valid YAML ({problem}); fix that file."


def sentence(error: BaseException, arguments: list[str] | None = None) -> str | None:
    """One sentence for an error Hydra or OmegaConf raised on the user's input (``arguments``:
    the command line's overrides, to name the one at fault), or None for any other error."""
    cause = error.__cause__
    if isinstance(error, ConfigError):
        return str(error)
    if isinstance(error, MissingConfigException):
        return _missing_config(error)
    if isinstance(error, OverrideParseException):
        return _bad_override(arguments or []) or str(error).splitlines()[0]
    if isinstance(error, SearchPathException):
        match = re.search(r"directory '(.*)' not found", str(error))
        folder = match.group(1) if match else str(error)
        return f"--config-dir {folder} is not a directory; give --config-dir a folder of configs."
    if isinstance(error, InstantiationException) and isinstance(cause, ConfigError):
        return str(cause)
    if isinstance(error, yaml.MarkedYAMLError):
        return _yaml(error)
    if isinstance(cause, yaml.MarkedYAMLError):
        return _yaml(cause)
    if isinstance(error, ConfigCompositionException):
        message = str(error)
        if found := _ambiguous(message) or _not_in_defaults(message, arguments or []):
            return found
        # An option merged into the schema fails inside Hydra's except block: its context.
        cause = cause or error.__context__
        match = re.match(r"Error merging override (.*)", message)
        override = match.group(1) if match else None
        if isinstance(cause, ValidationError):
            return _invalid_value(cause, override)
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
            return _experiment_package(cause, arguments or []) or _unknown_key(cause)
        if isinstance(cause, OmegaConfBaseException):
            return _omegaconf(cause)
        return message.splitlines()[0]
    if isinstance(error, (ConfigAttributeError, ConfigKeyError)):
        return _unknown_key(error)
    if isinstance(error, ValidationError):
        return _invalid_value(error, None)
    if isinstance(error, OmegaConfBaseException):
        return _omegaconf(error)
    return None


def _omegaconf(error: OmegaConfBaseException) -> str:
    key = getattr(error, "full_key", None) or "the config"
    message = str(getattr(error, "msg", None) or error).splitlines()[0].rstrip(".")
    if isinstance(error, InterpolationResolutionError):
        return f"{key}: {message}; an interpolation ${{...}} must name a key the config has."
    return f"{key}: {message}."


def install(arguments: list[str]) -> None:
    """Put :func:`sentence` in front of Hydra's own reporting (``run_and_report``, which
    ``hydra.main`` calls around every step): an error it knows ends the process with its
    sentence alone and exit status 2; ``HYDRA_FULL_ERROR=1`` keeps Hydra's report."""
    from hydra._internal import utils

    original: Callable[[Any], Any] = utils.run_and_report
    if getattr(original, "linkbench", False):
        return

    def run_and_report(func: Any) -> Any:
        def translated() -> Any:
            try:
                return func()
            except Exception as error:
                text = sentence(error, arguments)
                if text is None or os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                refuse(ConfigError(text))

        return original(translated)

    run_and_report.linkbench = True  # type: ignore[attr-defined]
    utils.run_and_report = run_and_report
