"""Every committed experiment composes, and every job of its sweep plans, on the machine it
is written for (GPU experiments on an 8-GPU machine, CPU ones on this one): a rename in the
schema or a group breaks the experiment here, not on the user's cluster."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hydra import compose
from hydra.core.override_parser.overrides_parser import OverridesParser

from linkbench.config.machine import Machine
from linkbench.launcher.planning import plan_job

from ..conftest import REPO

EXPERIMENTS = sorted(p.stem for p in (REPO / "experiments" / "experiment").glob("*.yaml"))
CPU_EXPERIMENTS = ("cpu_smoke", "lr_scaling_cpu")
# What an experiment's comment tells its user to add.
USER_SETS = {"lr_scaling": ["data.root=/data", "data.download=true"]}


def sweep_points(params: dict) -> list[list[str]]:
    """The overrides of every job of a sweeper's ``params``, as Hydra's basic sweeper makes
    them (its parser; no ranges or globs in committed experiments)."""
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in params.items()])
    axes = [
        [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
        if o.is_sweep_override()
        else [f"{o.get_key_element()}={o.get_value_element_as_str()}"]
        for o in parsed
    ]
    return [list(point) for point in itertools.product(*axes)]


def test_every_experiment_is_found():
    assert {"nvlink_vs_pcie", "slurm_nvlink_vs_pcie", "fsdp_vs_ddp", "gpt_comm",
            "allreduce_links", "lr_scaling", *CPU_EXPERIMENTS} <= set(EXPERIMENTS)  # fmt: skip


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_job_of_the_experiment_plans(compose_config, tmp_path: Path, experiment: str):
    base = [f"+experiment={experiment}", *USER_SETS.get(experiment, [])]
    compose_config()  # Hydra's context, as run.py's
    params = compose("config", overrides=base, return_hydra_config=True).hydra.sweeper.params
    points = sweep_points(dict(params or {}))
    assert points, f"{experiment} sweeps nothing"
    machine = Machine(0 if experiment in CPU_EXPERIMENTS else 8, cpu_cores=2)
    for point in points:
        plan = plan_job(compose_config([*base, *point]), str(tmp_path), point, machine)
        assert plan.config.steps > 0
