"""Hydra's own test suites for sweepers and launchers, run against ``hydra/sweeper=rounds``:
the rounds sweeper must stay a drop-in for Hydra's basic sweeper in any Hydra app."""

from __future__ import annotations

import copy

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.test_utils.launcher_common_tests import (
    BatchedSweeperTestSuite,
    IntegrationTestSuite,
    LauncherTestSuite,
)
from hydra.version import VersionBase, __compat_version__

from hydra_plugins.linkbench_sweeper.rounds_sweeper import RoundsSweeper

ROUNDS = ["hydra/sweeper=rounds"]


@pytest.fixture(autouse=True)
def hydras_compat_version():
    """The suites are written for Hydra's compat version base (1.1: jobs change directory);
    Hydra keeps the version base in a process-wide singleton that other tests in this
    process set to 1.3."""
    saved = copy.copy(VersionBase.instance())
    VersionBase.instance().setbase(__compat_version__)
    yield
    VersionBase.set_instance(saved)


@pytest.mark.parametrize("launcher_name, overrides", [("basic", ROUNDS)])
class TestRoundsSweeperWithTheBasicLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize(
    "launcher_name, overrides", [("basic", [*ROUNDS, "hydra.sweeper.max_batch_size=2"])]
)
class TestRoundsSweeperInBatches(BatchedSweeperTestSuite):
    pass


@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [({"defaults": [{"override hydra/sweeper": "rounds"}]}, ["-m"])],
)
class TestRoundsSweeperIntegration(IntegrationTestSuite):
    pass


def test_split_arguments_stays_hydras_static_method():
    """Hydra's suites and other plugins call it on the class."""
    parsed = OverridesParser.create().parse_overrides(["a=1,2", "b=3"])
    assert RoundsSweeper.split_arguments(parsed, None) == [[["a=1", "b=3"], ["a=2", "b=3"]]]
