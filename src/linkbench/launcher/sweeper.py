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

With ``repeats=auto`` (the default) the rounds are adaptive (:class:`AdaptiveRounds`): after
each round the sweeper reads the jobs' results, computes every comparison's verdict as the
summary does, with the repeated intervals of :mod:`linkbench.analysis.sequential`, and runs
another round only of the jobs that undecided comparisons need, until all are decided, or
``hydra.sweeper.max_rounds`` or ``hydra.sweeper.budget_s`` runs out. From round 4 on (and
after ``min_rounds``) a comparison that the rounds left would decide with a chance below 5 %
at the spread seen so far stops too, undecided (futility). Every round's verdicts, the
comparisons it stopped for futility, and the reason the sweep stopped go to rounds.json.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from linkbench.analysis.compare import FAMILIES, Comparison, default_axis, sweep_comparisons
from linkbench.analysis.inert import JobShape, a_a_note, inert_reason
from linkbench.analysis.report import axis_problem
from linkbench.analysis.sequential import SPENDING, Design, known_spending
from linkbench.analysis.stats import DEFAULT_MARGIN
from linkbench.analysis.sweep import Configuration, load_sweep
from linkbench.config.hydra_errors import sentence
from linkbench.config.overrides import key, override_texts, parse, settings
from linkbench.errors import ConfigError
from linkbench.files import ROUNDS_FILE, DamagedRecord, read_rounds, write_json
from linkbench.result import JobResult
from linkbench.sweep_defaults import (
    AUTO,
)

log = logging.getLogger("linkbench")

ROUND_KEY = "round"
# Rounds in which a configuration's job failed before an adaptive sweep stops running it.
GIVE_UP_AFTER = 2


# Launchers that run a batch's jobs at the same time on this host.
CONCURRENT_LAUNCHERS = ("JoblibLauncher",)


def sweep_repeats(config: DictConfig, arguments: list[str] | None = None) -> int | str:
    """How a multirun's jobs run in rounds: its ``repeats`` (from the config, the sweeper's
    params or the command line, the last one winning), a number of rounds or ``auto``
    (adaptive rounds); one round when ``repeats`` is swept."""
    params = dict(config.hydra.sweeper.get("params") or {})
    overrides = [f"{k}={v}" for k, v in params.items()]
    overrides += override_texts(config.hydra.overrides.task) if arguments is None else arguments
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
    if repeats == AUTO:
        return AUTO
    return max(1, int(repeats or 1))


def sweep_rounds(config: DictConfig, arguments: list[str] | None = None) -> int | None:
    """How many rounds a multirun runs: fixed ``repeats``, or None when adaptive."""
    repeats = sweep_repeats(config, arguments)
    return None if repeats == AUTO else int(repeats)


def check_rounds(
    config: DictConfig, rounds: int, concurrent_jobs: bool, adaptive: bool = False
) -> None:
    """Refuse, in one sentence, a sweep whose rounds would overwrite or measure each other:
    a ``hydra.sweep.subdir`` that does not tell rounds apart, or a launcher that runs jobs
    at the same time (unless ``hydra.sweeper.concurrent_jobs=true``). ``rounds``: the
    rounds it may run (an adaptive sweep's ``max_rounds``)."""
    if rounds < 2:
        return
    named = (
        f"repeats=auto (up to hydra.sweeper.max_rounds={rounds})"
        if adaptive
        else f"repeats={rounds}"
    )
    sweep = OmegaConf.to_container(config.hydra.sweep, resolve=False)
    subdir = str(sweep.get("subdir") if isinstance(sweep, dict) else None)
    excluded = config.hydra.job.config.override_dirname.get("exclude_keys") or []
    by_dirname = "override_dirname" in subdir and ROUND_KEY not in excluded
    if ROUND_KEY not in subdir and not by_dirname:
        raise ConfigError(
            f"hydra.sweep.subdir={subdir} puts the rounds of each configuration "
            f"({named}) into one directory, each overwriting the last; add "
            "${round} to it, e.g. 'hydra.sweep.subdir=" + subdir + "_round${round}'."
        )
    launcher = str(config.hydra.launcher.get("_target_", ""))
    if launcher.endswith(CONCURRENT_LAUNCHERS) and not concurrent_jobs:
        raise ConfigError(
            f"hydra.launcher={launcher} runs jobs at the same time, so the rounds of "
            f"{named} would share the devices and measure each other; use the basic "
            "launcher, or add hydra.sweeper.concurrent_jobs=true to run one round at a time."
        )


def check_size(configurations: int, fewest_jobs: int, adaptive: bool, max_jobs: int) -> None:
    """Say up front what the sweep means; refuse one beyond ``max_jobs`` until confirmed."""
    jobs = f"at least {fewest_jobs} jobs (adaptive rounds)" if adaptive else f"{fewest_jobs} jobs"
    if fewest_jobs > max_jobs:
        raise ConfigError(
            f"this sweep means {configurations} configurations and {jobs}, more than "
            f"hydra.sweeper.max_jobs={max_jobs}; add hydra.sweeper.max_jobs={fewest_jobs} (or "
            "more) to confirm it, or sweep fewer values."
        )
    log.info("sweep: %d configuration(s), %s", configurations, jobs)


def check_values(swept: dict[str, list[str]]) -> None:
    """Refuse a swept key that names one value twice: its jobs would share a directory."""
    for name, values in swept.items():
        if not values:
            raise ConfigError(
                f"{name} is swept over no value, so the sweep would run nothing; give it at "
                f"least one (e.g. {name}=8,16)."
            )
        same = [_same(v) for v in values]
        twice = [v for v, s in zip(values, same, strict=True) if same.count(s) > 1]
        if twice:
            spelt = " and ".join(dict.fromkeys(t for t in twice if _same(t) == _same(twice[0])))
            also = f" (as {spelt})" if " and " in spelt else ""
            raise ConfigError(
                f"{name}={','.join(values)} names {name}={twice[0]} more than once{also}: a "
                "configuration runs once per round (its rounds are its repeats); remove "
                "the repeated value."
            )


def _same(value: str) -> Any:
    """A swept value as the config reads it: 08, 8 and 8.0 are one number."""
    try:
        return float(value)
    except ValueError:
        return value


def check_axis(swept: dict[str, list[str]], axis: Any, baseline: Any) -> None:
    """Refuse a summary axis that is not swept, or a baseline that is not one of its values
    (:func:`linkbench.analysis.report.axis_problem`, as ``report`` refuses them)."""
    varied = {k: swept[k] for k in sorted(swept) if len(swept[k]) > 1}
    setting = "hydra.callbacks.sweep_summary.{}={}".format
    if problem := axis_problem(varied, axis, baseline, setting):
        raise ConfigError(problem)


def check_summary(summary: Mapping[str, Any]) -> None:
    """Refuse, in one sentence, summary settings the analysis cannot use (its margin,
    accuracy tolerance and family), before the first job rather than after the last."""
    key = "hydra.callbacks.sweep_summary.{}={}".format
    for name, low, high in (("margin", 0.0, 1.0), ("accuracy_tolerance", 0.0, 1.0)):
        if name not in summary:
            continue
        value = summary[name]
        number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        if number is None or not (low < number < high or (name != "margin" and number == low)):
            shown = "above 0 and below 1" if name == "margin" else "from 0 to below 1"
            raise ConfigError(
                f"{key(name, value)} must be a fraction {shown} (0.02 is ±2 %); e.g. "
                f"{key(name, 0.02 if name == 'margin' else 0.01)}."
            )
    family = summary.get("family", FAMILIES[0])
    if family not in FAMILIES:
        raise ConfigError(
            f"{key('family', family)} is not a family adjustment; choose one of "
            f"{', '.join(FAMILIES)}."
        )


def check_configurations(jobs: list[list[str]], plan: Callable[[list[str]], None]) -> None:
    """Plan every configuration of the sweep before its first job: the first one the plan
    refuses, or Hydra cannot compose (``strategy=fsdp strategy/comm_hook=bf16``), refuses the
    sweep, in one sentence naming it, and nothing is created."""
    for index, job in enumerate(jobs):
        try:
            plan(job)
        except Exception as error:
            if (reason := sentence(error, job)) is None:
                raise
            shown = " ".join(job) or "(no override)"
            raise ConfigError(
                f"configuration {index + 1} of {len(jobs)} of this sweep ({shown}) is refused, "
                f"so no job starts: {reason}"
            ) from None


def say_inert_axis(swept: dict[str, list[str]], axis: str | None, shapes: list[JobShape]) -> None:
    """Before the first job: the sweep's axis (``axis``, or the default one of ``swept``)
    cannot act on its jobs (``shapes``, one per configuration, as planned): say so, since
    each of its comparisons is then an A/A check (:mod:`linkbench.analysis.inert`)."""
    varied = [k for k, values in swept.items() if len(values) > 1 and k != ROUND_KEY]
    axis = axis or default_axis(varied)
    if axis is not None and (reason := inert_reason(axis, shapes)):
        log.warning(a_a_note(axis, reason))


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


def check_adaptive(max_rounds: int, min_rounds: int, budget_s: float | None, spending: str) -> None:
    """Refuse, in one sentence, adaptive-round options that cannot run."""
    if max_rounds < 2:
        raise ConfigError(
            f"hydra.sweeper.max_rounds={max_rounds} leaves no round to compare with; use 2 "
            "or more (paired intervals need two rounds), or repeats=1 for one round."
        )
    if not 1 <= min_rounds <= max_rounds:
        raise ConfigError(
            f"hydra.sweeper.min_rounds={min_rounds} must be from 1 to "
            f"hydra.sweeper.max_rounds={max_rounds}."
        )
    if budget_s is not None and budget_s <= 0:
        raise ConfigError(f"hydra.sweeper.budget_s={budget_s} must be positive seconds, or null.")
    if not known_spending(spending):
        raise ConfigError(
            f"hydra.sweeper.spending={spending} is not a spending function; choose one of "
            f"{', '.join(SPENDING)}."
        )


def _matches(job: list[str], config: Configuration) -> bool:
    values = {k: str(v) for k, v in settings(job).items()}
    return all(values.get(k) == str(v) for k, v in config.settings)


def after_round(
    comparisons: list[Comparison], r: int, design: Design
) -> tuple[str | None, list[Comparison], list[Comparison]]:
    """The rule after ``r`` rounds: (why the sweep stops, or None; the comparisons that still
    need rounds, or that were undecided where it stops; those found beyond deciding).
    ``comparisons``: those the sweep can still run (none of a configuration given up)."""
    undecided = [c for c in comparisons if c.verdict == "inconclusive"]
    if r >= design.max_rounds:
        return f"max_rounds={design.max_rounds} reached", undecided, []
    min_rounds = design.min_rounds
    if r < min_rounds:
        return None, undecided, []
    futile = [c for c in undecided if c.futile]
    undecided = [c for c in undecided if not c.futile]
    if not comparisons:
        return f"min_rounds={min_rounds} done, nothing to compare", [], []
    if not undecided:
        beyond = f" or beyond deciding ({len(futile)})" if futile else ""
        return f"every comparison decided{beyond}", [], futile
    return None, undecided, futile


class AdaptiveRounds:
    """The rounds of an adaptive sweep (``repeats=auto``): which jobs each round runs, and
    when to stop. Every configuration runs the design's ``min_rounds`` rounds; after that
    only the jobs of undecided comparisons, until none is left, or ``max_rounds`` or
    ``budget_s`` runs out (a round that would overrun the budget, estimated from the jobs so
    far, is not started).

    A job that fails costs its configuration that round's run (its comparisons pair the
    rounds both sides completed) and the sweep goes on; a configuration whose job failed in
    ``GIVE_UP_AFTER`` rounds is not run again (a crash that repeats is not noise), and its
    comparisons no longer hold the sweep open. rounds.json names both."""

    def __init__(
        self,
        jobs: list[list[str]],
        sweep_dir: Path,
        design: Design,
        budget_s: float | None = None,
        summary: dict[str, Any] | None = None,
        resume: bool = False,
    ) -> None:
        self.jobs, self.sweep_dir, self.design = jobs, sweep_dir, design
        self.budget_s = budget_s
        self.summary = {"axis": None, "baseline": None, "margin": DEFAULT_MARGIN, **(summary or {})}
        self.started = time.monotonic()
        self.rounds: list[dict[str, Any]] = []
        self.stopped: str | None = None
        # A resumed sweep runs its rounds again from the first (their completed jobs are
        # skipped) and may decide sooner: what rounds.json says of rounds it did not reach
        # stays, so the record only grows.
        try:
            earlier = (read_rounds(sweep_dir) or {}) if resume else {}
        except DamagedRecord as error:
            raise ConfigError(f"resume=true: {error}") from None
        self.earlier: list[dict[str, Any]] = list(earlier.get("rounds") or [])
        self.failures: dict[int, int] = {}  # index of a job in ``jobs`` -> rounds it failed

    def next_round(self) -> list[list[str]]:
        """The jobs of the next round (``round=R`` first, odd rounds reversed), or [] when
        the sweep is done; records the round that just ended."""
        r = len(self.rounds)
        if r == 0:
            return self._start(list(self.jobs))
        comparisons = [c for c in self._close_round() if self._runnable(c)]
        stop, undecided, futile = after_round(comparisons, r, self.design)
        if futile:  # what the rule acted on, at the round it acted, for the verdict line
            self.rounds[-1]["futile"] = {
                c.name: round(c.chance_to_decide() or 0.0, 4) for c in futile
            }
            self.rounds[-1]["futile_pairs"] = {c.name: c.pairs for c in futile}
            self.rounds[-1]["futile_margin_needed"] = {
                c.name: round(c.equal_margin_needed() or 0.0, 4) for c in futile
            }
        if stop is not None:
            return self._stop(stop, undecided)
        needed = [job for i, job in enumerate(self.jobs) if i not in self._given_up()]
        if not needed:
            return self._stop("every configuration failed", undecided)
        if r >= self.design.min_rounds:
            needed = [
                job
                for job in needed
                if any(_matches(job, c.arm) or _matches(job, c.base) for c in undecided)
            ]
        estimate = self._seconds_per_job() * len(needed)
        elapsed = time.monotonic() - self.started
        if self.budget_s is not None and elapsed + estimate > self.budget_s:
            return self._stop(
                f"budget_s={self.budget_s:g} would run out in round {r + 1} "
                f"(about {estimate:.0f} s more after {elapsed:.0f} s)",
                undecided,
            )
        beyond = f" ({len(futile)} beyond deciding)" if futile else ""
        log.info(
            "round %d of at most %d: %d of %d comparisons decided%s; round %d runs %d job(s), "
            "about %.0f s",
            r, self.design.max_rounds, len(comparisons) - len(undecided), len(comparisons),
            beyond, r + 1, len(needed), estimate,
        )  # fmt: skip
        return self._start(needed)

    def _start(self, jobs: list[list[str]]) -> list[list[str]]:
        r = len(self.rounds)
        ordered = jobs[::-1] if r % 2 else jobs
        self.rounds.append({"round": r, "jobs": len(jobs), "started_s": self._elapsed()})
        self._write()
        return [[f"{ROUND_KEY}={r}", *job] for job in ordered]

    def _close_round(self) -> list[Comparison]:
        results = load_sweep(self.sweep_dir)
        found = sweep_comparisons(results, design=self.design, **self.summary)
        verdicts = {c.name: c.verdict for c in found.comparisons}
        failed = self._record_failures(results, len(self.rounds) - 1)
        self.rounds[-1].update(ended_s=self._elapsed(), verdicts=verdicts)
        if failed:
            self.rounds[-1]["failed"] = failed
        if given_up := self._given_up():
            self.rounds[-1]["given_up"] = [" ".join(self.jobs[i]) for i in sorted(given_up)]
        self._write()
        return found.comparisons

    def _record_failures(self, results: list[JobResult], r: int) -> list[str]:
        """Count the jobs of round ``r`` that did not complete; their directory names."""
        failed = []
        for result in results:
            if result.get("round") != r or result.get("status") == "completed":
                continue
            values = {k: str(v) for k, v in (result.get("settings") or {}).items()}
            values.pop(ROUND_KEY, None)
            for index, job in enumerate(self.jobs):
                if {k: str(v) for k, v in settings(job).items()} == values:
                    self.failures[index] = self.failures.get(index, 0) + 1
                    failed.append(str(result.get("job")))
        return failed

    def _given_up(self) -> set[int]:
        """The jobs (indices) whose configuration failed in GIVE_UP_AFTER rounds."""
        return {i for i, n in self.failures.items() if n >= GIVE_UP_AFTER}

    def _runnable(self, comparison: Comparison) -> bool:
        """Whether the sweep still runs both sides of ``comparison``."""
        given_up = [self.jobs[i] for i in self._given_up()]
        return not any(
            _matches(job, comparison.arm) or _matches(job, comparison.base) for job in given_up
        )

    def _stop(self, reason: str, undecided: list[Comparison]) -> list[list[str]]:
        left = f", {len(undecided)} comparison(s) undecided" if undecided else ""
        if given_up := self._given_up():
            left += (
                f"; {len(given_up)} configuration(s) not run again after failing in "
                f"{GIVE_UP_AFTER} rounds"
            )
        self.stopped = reason + left
        log.info("adaptive rounds stopped after %d round(s): %s", len(self.rounds), self.stopped)
        self._write()
        return []

    def _seconds_per_job(self) -> float:
        spans = [(r["ended_s"] - r["started_s"]) / r["jobs"] for r in self.rounds if "ended_s" in r]
        return statistics.fmean(spans) if spans else 0.0

    def _elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def _write(self) -> None:
        write_json(
            self.sweep_dir / ROUNDS_FILE,
            {
                "rule": "adaptive",
                "max_rounds": self.design.max_rounds,
                "spending": self.design.spending,
                "min_rounds": self.design.min_rounds,
                "budget_s": self.budget_s,
                "rounds": self.rounds + self.earlier[len(self.rounds) :],
                "stopped": self.stopped,
            },
        )
