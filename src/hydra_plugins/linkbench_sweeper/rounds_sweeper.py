"""``hydra/sweeper=rounds``: Hydra's basic sweeper with a sweep's ``repeats`` run as
interleaved rounds (:mod:`linkbench.launcher.sweeper`). Hydra accepts sweepers only from
its ``hydra_plugins`` package, hence this module.

Hydra's own ``split_arguments`` (a static method) makes the jobs; fixed rounds
(``repeats=N``) are put in order (every odd round reversed) when the first batch is taken;
adaptive rounds (``repeats=auto``, the default) are made one at a time, after the previous
round's results were read (:class:`linkbench.launcher.sweeper.AdaptiveRounds`). A
launcher that runs the jobs of a batch at the same time (joblib) is refused, since rounds
running together on the same devices measure each other; with
``hydra.sweeper.concurrent_jobs=true`` it runs, one round per batch, so rounds at least
never overlap. Under Hydra's basic launcher the jobs start one at a time, and none starts
once the user stopped the sweep (:mod:`linkbench.launcher.stopping`). A failed job does not
end the sweep: the others run, and the sweep ends after its summary with the failed jobs
named and exit status 1; a full disk ends it at once (:mod:`linkbench.launcher.sweep_end`).

Like Hydra's own plugins, the module stores its config (``hydra/sweeper=rounds``) when Hydra
imports it to look for plugins, so the sweeper is there for any Hydra app, run.py or not."""

# No `from __future__ import annotations`: Hydra imports plugins outside sys.modules, where
# dataclasses cannot resolve string annotations.
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, cast

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf

from linkbench.sweep_defaults import (
    AUTO,
    DEFAULT_MAX_JOBS,
    DEFAULT_MAX_ROUNDS,
    DEFAULT_MIN_ROUNDS,
    DEFAULT_SPENDING,
    SUBDIR_RESOLVER,
    job_subdir,
)

# What a sweep runs on (numpy, the analysis, the plan, the stop handling) is imported where a
# sweep uses it, not here: Hydra imports this module on every compose, to register it.
if TYPE_CHECKING:
    from linkbench.launcher.sweeper import AdaptiveRounds

LINKBENCH_SUMMARY = "linkbench.launcher.callbacks.SweepSummary"


@dataclass
class RoundsSweeperConf:
    """``hydra/sweeper=rounds``: the basic sweeper's options and ``concurrent_jobs``."""

    _target_: str = "hydra_plugins.linkbench_sweeper.rounds_sweeper.RoundsSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None
    concurrent_jobs: bool = False
    """Let a launcher that runs a batch's jobs at the same time (joblib) run the sweep, one
    round per batch."""
    max_rounds: int = DEFAULT_MAX_ROUNDS
    """repeats=auto: the most rounds an undecided comparison runs."""
    min_rounds: int = DEFAULT_MIN_ROUNDS
    """repeats=auto: rounds every configuration runs, decided or not."""
    budget_s: float | None = None
    """repeats=auto: no round is started that would end the sweep later than this (seconds)."""
    spending: str = DEFAULT_SPENDING
    """repeats=auto: how the design spends its 5 % over the looks: obrien_fleming or pocock."""
    max_jobs: int = DEFAULT_MAX_JOBS
    """A sweep of more jobs (fixed rounds) or more at its fewest (adaptive: min_rounds per
    configuration) is refused until this is raised to confirm it."""


ConfigStore.instance().store(
    group="hydra/sweeper", name="rounds", node=RoundsSweeperConf, provider="linkbench"
)
if not OmegaConf.has_resolver(SUBDIR_RESOLVER):  # conf/config.yaml's hydra.sweep.subdir
    OmegaConf.register_new_resolver(SUBDIR_RESOLVER, job_subdir)


class RoundsSweeper(BasicSweeper):
    """Hydra's basic sweeper, with the sweep's repeats run as interleaved rounds."""

    rounds = 1
    is_adaptive = False

    def __init__(
        self,
        max_batch_size: int | None = None,
        params: dict[str, str] | None = None,
        concurrent_jobs: bool = False,
        max_rounds: int = DEFAULT_MAX_ROUNDS,
        min_rounds: int = DEFAULT_MIN_ROUNDS,
        budget_s: float | None = None,
        spending: str = DEFAULT_SPENDING,
        max_jobs: int = DEFAULT_MAX_JOBS,
    ) -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.concurrent_jobs = concurrent_jobs
        self.max_rounds, self.min_rounds = max_rounds, min_rounds
        self.budget_s, self.spending = budget_s, spending
        self.max_jobs = max_jobs
        self._ordered = False
        self._composed = False  # every configuration composed and planned before the sweep
        self.adaptive: AdaptiveRounds | None = None

    def sweep(self, arguments: list[str]) -> Any:
        from pathlib import Path

        from linkbench.errors import ConfigError, refuse
        from linkbench.launcher import stopping, sweep_lock
        from linkbench.launcher.sweeper import check_adaptive, check_rounds, sweep_repeats

        assert self.config is not None
        try:  # the sweep checked whole: a refusal is its sentence alone, before any job
            sweep_dir = Path(self.config.hydra.sweep.dir)
            if sweep_dir.is_dir():  # another sweep's, or this one's to resume
                sweep_lock.hold(sweep_dir)
                sweep_lock.check_resumed(sweep_dir, self.config)
            repeats = sweep_repeats(self.config, arguments)
            self.is_adaptive = repeats == AUTO
            if self.is_adaptive:
                check_adaptive(self.max_rounds, self.min_rounds, self.budget_s, self.spending)
            self.rounds = self.max_rounds if self.is_adaptive else int(repeats)
            check_rounds(self.config, self.rounds, self.concurrent_jobs, self.is_adaptive)
            self._check_whole(arguments)
        except ConfigError as error:
            refuse(error)
        self._ordered = False
        self.adaptive = None
        stopping.reset()
        assert self.launcher is not None
        if type(self.launcher).__name__ == "BasicLauncher":  # one job at a time: stoppable
            # The wrappers stand in for the launcher (every other attribute is its own).
            self.launcher = cast(
                Launcher,
                stopping.OneJobAtATime(self.launcher, self._jobs_not_taken, self.is_adaptive),
            )
        elif type(self.launcher).__module__.startswith("hydra_plugins.hydra_submitit_launcher"):
            # a batch at once, each job in submitit's processes
            self.launcher = cast(
                Launcher,
                stopping.BatchAtOnce(self.launcher, self._jobs_not_taken, self.is_adaptive),
            )
        return self._run(arguments)

    def _run(self, arguments: list[str]) -> list[Sequence[JobReturn]]:
        """Hydra's basic sweep, except that a failed job does not end the sweep: the other
        jobs run (every round an adaptive design needs), and the sweep ends after its
        summary with the failed jobs named and exit status 1 (:mod:`linkbench.launcher.
        sweep_end`). A full disk ends it at once: a further job would fail the same way."""
        import errno
        import shutil
        from pathlib import Path

        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.core.utils import JobStatus
        from omegaconf import OmegaConf

        from linkbench.errors import ConfigError, DiskFull, refuse
        from linkbench.files import MULTIRUN_FILE
        from linkbench.launcher import sweep_end, sweep_lock

        assert self.config is not None and self.launcher is not None
        assert self.hydra_context is not None
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        parsed = parser.parse_overrides([*self._parse_config(), *arguments])
        self.overrides = self.split_arguments(parsed, self.max_batch_size)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        returns: list[Sequence[JobReturn]] = []
        failed: list[JobReturn] = []
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            try:  # a sweep that made the folder in the same moment as this one
                sweep_lock.hold(sweep_dir)
            except ConfigError as error:
                refuse(error)
            OmegaConf.save(self.config, sweep_dir / MULTIRUN_FILE)
            index = 0
            while not self.is_done():
                batch = self.get_job_batch()
                self.validate_batch_is_legal(batch)
                results = self.launcher.launch(batch, initial_job_idx=index)
                index += len(batch)
                returns.append(results)
                failed += [r for r in results if r.status == JobStatus.FAILED]
                if full := [r for r in failed if isinstance(r._return_value, DiskFull)]:
                    self._end_on_full_disk(sweep_end.job_name(full[0]))
        except OSError as error:  # Hydra's own writes for a job (its .hydra folder)
            if error.errno != errno.ENOSPC:
                raise
            where = sweep_end.job_set_up(sweep_dir, error)
            if where is not None:  # Hydra's half-written files of a job that never ran
                shutil.rmtree(sweep_dir / where, ignore_errors=True)
            self._end_on_full_disk(where, setting_up=True)
        if failed:
            self._multirun_end()
            sweep_end.end_with_failures(self.config, failed)
        return returns

    def _multirun_end(self) -> None:
        """The callbacks' end of the sweep (its summary), before the sweep ends otherwise."""
        assert self.hydra_context is not None and self.config is not None
        self.hydra_context.callbacks.on_multirun_end(
            config=self.config, loader=self.hydra_context.config_loader
        )

    def _end_on_full_disk(self, where: str | None, *, setting_up: bool = False) -> NoReturn:
        from pathlib import Path

        from linkbench.analysis.sweep import load_sweep
        from linkbench.launcher import sweep_end

        assert self.config is not None
        self._multirun_end()
        kept = [j for j in load_sweep(Path(str(self.config.hydra.sweep.dir)))
                if j.get("status") == "completed"]  # fmt: skip
        sweep_end.end_on_full_disk(self.config, where, len(kept), setting_up=setting_up)

    def _check_whole(self, arguments: list[str]) -> None:
        """Before the first job: every value once, the sweep's size (said, and confirmed when
        large), the summary's axis and baseline among the values, every configuration
        planned."""
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from omegaconf import open_dict

        from linkbench.config.machine import Machine
        from linkbench.config.overrides import sweep_values
        from linkbench.launcher.sweeper import (
            check_axis,
            check_configurations,
            check_size,
            check_summary,
            check_values,
            say_inert_axis,
        )

        assert self.config is not None and self.hydra_context is not None
        loader = self.hydra_context.config_loader
        parsed = OverridesParser.create(config_loader=loader).parse_overrides(
            [*BasicSweeper._parse_config(self), *arguments]
        )
        # as split_arguments reads them: a later override of a key wins
        swept = {o.get_key_element(): sweep_values(o) for o in parsed}
        check_values(swept)
        jobs = [list(job) for job in BasicSweeper.split_arguments(parsed, None)[0]]
        fewest = len(jobs) * (self.min_rounds if self.is_adaptive else self.rounds)
        check_size(len(jobs), fewest, self.is_adaptive, self.max_jobs)
        summary = self.config.hydra.callbacks.get("sweep_summary") or {}
        if summary.get("_target_") != LINKBENCH_SUMMARY:
            return  # another Hydra app: its configurations are not linkbench's to plan
        check_summary(summary)
        check_axis(swept, summary.get("axis"), summary.get("baseline"))
        if type(self.launcher).__name__ == "BasicLauncher":  # its jobs launch from here
            import os

            from linkbench.launcher.forkserver import start_early

            start_early(os.environ)  # the workers' imports run beside the planning below
        # torch: once a sweep is planned
        from linkbench.launcher.parts_check import check_parts
        from linkbench.launcher.planning import plan_job
        from linkbench.worker.runtime import runtime_of

        machine = Machine.current()

        config = self.config
        shapes = []

        def plan(job: list[str]) -> None:
            cfg = loader.load_sweep_config(config, job)
            with open_dict(cfg):
                del cfg["hydra"]
            planned = plan_job(cfg, None, job, machine, check_parts, runtime_of=runtime_of)
            shapes.append(planned.shape())

        check_configurations(jobs, plan)
        self._composed = True
        say_inert_axis(swept, summary.get("axis"), shapes)

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        """Hydra's check that a batch's jobs compose, each composed once more, unless
        :meth:`_check_whole` composed and planned every configuration already (a round adds
        only ``round=R``)."""
        if not self._composed:
            super().validate_batch_is_legal(batch)

    def _jobs_not_taken(self) -> int:
        return sum(len(batch) for batch in (self.overrides or [])[self.batch_index :])

    def _parse_config(self) -> list[str]:
        from linkbench.launcher.sweeper import round_sweep

        rounds = [] if self.is_adaptive else round_sweep(self.rounds)
        return rounds + super()._parse_config()

    def is_done(self) -> bool:
        if not self.is_adaptive:
            return super().is_done()
        from pathlib import Path

        from linkbench.analysis.sequential import Design
        from linkbench.launcher.sweeper import AdaptiveRounds

        assert self.overrides is not None and self.config is not None
        if self.adaptive is None:  # the configurations, once each, as Hydra expanded them
            summary = self.config.hydra.callbacks.get("sweep_summary") or {}
            self.adaptive = AdaptiveRounds(
                [list(j) for batch in self.overrides for j in batch],
                Path(self.config.hydra.sweep.dir),
                Design(self.max_rounds, self.spending, self.min_rounds),
                self.budget_s,
                {
                    k: summary.get(k)
                    for k in ("axis", "baseline", "margin", "family")
                    if k in summary
                },
                resume=bool(self.config.get("resume", False)),
            )
            self.overrides, self.batch_index = [], 0
        if self.batch_index < len(self.overrides):
            return False
        jobs = self.adaptive.next_round()
        if not jobs:
            return True
        size = len(jobs) if self.concurrent_jobs else self.max_batch_size
        self.overrides = [*self.overrides, *BasicSweeper.split_overrides_to_chunks(jobs, size)]
        return False

    def get_job_batch(self) -> Sequence[Sequence[str]]:
        if not self._ordered and not self.is_adaptive:
            from linkbench.launcher.sweeper import alternate_rounds

            assert self.overrides is not None
            jobs = alternate_rounds([list(j) for b in self.overrides for j in b], self.rounds)
            size = len(jobs) // self.rounds if self.concurrent_jobs else self.max_batch_size
            self.overrides = list(BasicSweeper.split_overrides_to_chunks(jobs, size))
            self._ordered = True
        return super().get_job_batch()
