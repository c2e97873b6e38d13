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
default (``hydra/sweeper=rounds``, which the plugin module stores in Hydra's ConfigStore).
A sweep
that sweeps ``repeats`` itself, or asks for one repeat, runs as the basic sweeper would.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from linkbench.config.overrides import key, parse
from linkbench.errors import ConfigError

ROUND_KEY = "round"


# Launchers that run a batch's jobs at the same time on this host.
CONCURRENT_LAUNCHERS = ("JoblibLauncher",)


def sweep_rounds(config: DictConfig, arguments: list[str] | None = None) -> int:
    """How many rounds a multirun's jobs run in: its ``repeats`` (from the config, the
    sweeper's params or the command line, the last one winning), unless ``repeats`` is
    swept."""
    params = dict(config.hydra.sweeper.get("params") or {})
    overrides = [f"{k}={v}" for k, v in params.items()]
    overrides += list(config.hydra.overrides.task if arguments is None else arguments)
    try:
        parsed = parse(overrides)
    except Exception:
        return 1
    swept = {key(o) for o in parsed if o.is_sweep_override()}
    if "repeats" in swept or ROUND_KEY in swept:
        return 1
    repeats = config.get("repeats", 1)
    for override in parsed:
        if key(override) == "repeats":
            repeats = override.value()
    return max(1, int(repeats or 1))


def check_rounds(config: DictConfig, rounds: int, concurrent_jobs: bool) -> None:
    """Refuse, in one sentence, a sweep whose rounds would overwrite or measure each other:
    a ``hydra.sweep.subdir`` that does not tell rounds apart, or a launcher that runs jobs
    at the same time (unless ``hydra.sweeper.concurrent_jobs=true``)."""
    if rounds < 2:
        return
    sweep = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    subdir = str(sweep.get("subdir") if isinstance(sweep, dict) else None)
    excluded = config.hydra.job.config.override_dirname.get("exclude_keys") or []
    by_dirname = "override_dirname" in subdir and ROUND_KEY not in excluded
    if ROUND_KEY not in subdir and not by_dirname:
        raise ConfigError(
            f"hydra.sweep.subdir={subdir} puts the {rounds} rounds of each configuration "
            f"(repeats={rounds}) into one directory, each overwriting the last; add "
            "${round} to it, e.g. 'hydra.sweep.subdir=" + subdir + "_round${round}'."
        )
    launcher = str(config.hydra.launcher.get("_target_", ""))
    if launcher.endswith(CONCURRENT_LAUNCHERS) and not concurrent_jobs:
        raise ConfigError(
            f"hydra.launcher={launcher} runs jobs at the same time, so the rounds of "
            f"repeats={rounds} would share the devices and measure each other; use the basic "
            "launcher, or add hydra.sweeper.concurrent_jobs=true to run one round at a time."
        )


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
