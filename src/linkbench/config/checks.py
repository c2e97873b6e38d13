"""The one way a config is refused: a :class:`~linkbench.errors.ConfigError` whose message is
one sentence naming the key and the fix. Every config module checks with these."""

from __future__ import annotations

from linkbench.errors import ConfigError


def require(ok: bool, message: str) -> None:
    """Refuse the configuration with ``message`` (one sentence naming the key and the fix)."""
    if not ok:
        raise ConfigError(message)


def require_positive(owner: str, **values: float) -> None:
    """Each ``key=value`` must be > 0; ``owner`` prefixes the key (``ddp.`` ...)."""
    for key, value in values.items():
        require(value > 0, f"{owner}{key}={value} must be positive.")


def require_not_negative(owner: str, **values: float) -> None:
    for key, value in values.items():
        require(value >= 0, f"{owner}{key}={value} must be >= 0.")
