"""A job's plan from its composed config: the launcher gathers the facts the plan decides
from, read without changing anything (the machine, the data on disk, the checkpoint found,
whether this host can emulate the link), has :func:`~linkbench.config.plan.make_plan`
decide, and then does to the disk the one thing the plan says (a damaged checkpoint set
aside, by one process of the job). Imports no torch: the sweeper plans every configuration
of a sweep with it before any job starts."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from linkbench.config.data import DataFound
from linkbench.config.facts import Facts
from linkbench.config.machine import Machine
from linkbench.config.overrides import JobOverrides
from linkbench.config.plan import JobPlan, job_config, make_plan
from linkbench.config.runtime import PartsCheck, RuntimeOf
from linkbench.config.schema import Config
from linkbench.files import CheckpointFound, find_checkpoint, set_aside


def gather_facts(config: Config, job_dir: Path | None, machine: Machine) -> Facts:
    """What ``config`` needs known before it is planned, read only. Without a ``job_dir``
    (the sweeper checking a configuration before its job exists) no checkpoint is looked for."""
    return Facts(
        machine=machine,
        data=config.data.survey() if config.task.spec().trains else DataFound(),
        checkpoint=(
            find_checkpoint(job_dir) if config.resume and job_dir is not None else CheckpointFound()
        ),
        link_problem=config.interconnect.survey(machine),
    )


def plan_job(
    cfg: DictConfig | Config,
    job_dir: str | Path | None,
    overrides: Sequence[str] | JobOverrides,
    machine: Machine,
    parts_check: PartsCheck | None = None,
    sweep_dir: str | None = None,
    runtime_of: RuntimeOf | None = None,
) -> JobPlan:
    """The checked plan of the job in ``job_dir`` (None: a configuration checked before its
    job exists, whose plan is not run). Raises ConfigError on bad input, before anything on
    disk has changed."""
    given = JobOverrides.of(overrides)
    config = job_config(cfg, given, machine)
    facts = gather_facts(config, None if job_dir is None else Path(job_dir), machine)
    plan = make_plan(config, str(job_dir or ""), given, facts, parts_check, sweep_dir, runtime_of)
    if machine.outside is None or machine.outside.rank == 0:
        set_aside(facts.checkpoint)
    return plan
