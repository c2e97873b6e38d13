"""A sweep's ``repeats`` as interleaved rounds: round 1 runs every configuration once, then
round 2, and so on, so slow drift of the machine lands inside every configuration's spread
instead of between configurations.

The sweeper is Hydra's basic sweeper with one more sweep dimension in front,
``round=0,...,repeats-1``, and every other round run in reverse order (an order effect inside
a round then favours no configuration); each job of a round runs its measurement once, and the
sweep
summary groups the rounds of a configuration into its runs (paired round by round when two
configurations are compared). Hydra finds plugins only in its ``hydra_plugins`` package, so
the class lives in ``hydra_plugins/linkbench_sweeper``; ``conf/config.yaml`` makes it the
default (``hydra/sweeper=rounds``, registered by :func:`linkbench.config.schema.register`).
A sweep
that sweeps ``repeats`` itself, or asks for one repeat, runs as the basic sweeper would.
"""

from __future__ import annotations

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

ROUND_KEY = "round"


def sweep_rounds(config: DictConfig, arguments: list[str] | None = None) -> int:
    """How many rounds a multirun's jobs run in: its ``repeats``, unless ``repeats`` is swept."""
    params = dict(config.hydra.sweeper.get("params") or {})
    overrides = [f"{k}={v}" for k, v in params.items()]
    overrides += list(config.hydra.overrides.task if arguments is None else arguments)
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except Exception:
        return 1
    swept = {o.get_key_element().lstrip("+~") for o in parsed if o.is_sweep_override()}
    if "repeats" in swept or ROUND_KEY in swept:
        return 1
    return max(1, int(config.get("repeats", 1)))


def alternate_rounds(jobs: list[list[str]], rounds: int) -> list[list[str]]:
    """The jobs (round by round, configurations in the same order in each) with every odd
    round's configurations reversed, so each configuration runs as often early in a round as
    late: an effect of the order inside a round (a warm cache, a cooling machine) cannot
    favour one configuration over another."""
    if rounds < 2:
        return jobs
    size = len(jobs) // rounds
    blocks = [jobs[r * size : (r + 1) * size] for r in range(rounds)]
    return [job for r, block in enumerate(blocks) for job in (block[::-1] if r % 2 else block)]


def round_sweep(rounds: int) -> list[str]:
    """The sweep dimension put in front of a multirun's own: every configuration once per
    round (the first dimension varies slowest)."""
    return [f"{ROUND_KEY}=range({rounds})"] if rounds > 1 else []
