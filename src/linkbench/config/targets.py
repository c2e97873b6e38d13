"""Classes the config names by their import path (``strategy._target_``, ``task._target_``),
imported as Hydra's ``instantiate`` would, with one sentence naming the key when that fails."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import hydra.utils

from linkbench.config.checks import require
from linkbench.errors import ConfigError

T = TypeVar("T")


@contextmanager
def hydra_lookups_quiet() -> Iterator[None]:
    """Hydra's ``get_class``/``get_method`` log an ERROR line of their own before they
    raise; where linkbench turns the failure into one sentence, that line is noise."""
    hydra_log = logging.getLogger("hydra.utils")
    level = hydra_log.level
    hydra_log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        hydra_log.setLevel(level)


def import_class(key: str, target: str, base: str, has: str) -> Any:
    """The class ``key`` names, which must be a subclass of ``base`` (a dotted name: the
    importing layer may not import it): one with the attribute ``has``."""
    try:
        with hydra_lookups_quiet():
            cls = hydra.utils.get_class(target)
    except Exception as error:  # Hydra wraps the import's own error
        cause = error.__cause__ or error
        raise ConfigError(
            f"{key}={target} cannot be imported ({type(cause).__name__}: {cause}); name a "
            f"{base} subclass.".replace("\n", " ")
        ) from None
    require(
        isinstance(cls, type) and hasattr(cls, has),
        f"{key}={target} is not a {base} subclass; name one (see docs/extending.md).",
    )
    return cls


def subclass_named(key: str, target: str, base: type[T], has: str) -> type[T]:
    """The subclass of ``base`` that ``key`` names (:func:`import_class`, then checked to be
    one): for a process that may import ``base`` itself."""
    name = f"{base.__module__}.{base.__qualname__}"
    cls = import_class(key, target, name, has)
    require(issubclass(cls, base), f"{key}={target} is not a {name} subclass; name one.")
    return cls
