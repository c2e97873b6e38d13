"""Shared helpers: composing configs with Hydra's compose API and running run.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from linkbench.config.registry import register
from linkbench.stop import alive  # noqa: F401 (the tests' too)

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"
# A job that finishes in a few seconds on two CPU cores.
QUICK = ["steps=6", "untimed_steps=2", "log_every=2", "batch=4"]

# model=auto and precision=auto follow the Machine a test plans for (tiny and fp32 without a
# GPU); the jobs tests start run as on a CPU box unless a test says otherwise (clean_env).
register(project_root=REPO)

# pytest-xdist runs several tests at once: each test, and each rank of the jobs it starts,
# gets its share of the cores, so that a many-core machine running many tests is not
# oversubscribed (a job's ranks otherwise take every core each; tests that time a stop or a
# stall then fail for want of CPU).
_CORES = len(os.sched_getaffinity(0))
_TESTS_AT_ONCE = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
CORES_PER_TEST = max(1, _CORES // _TESTS_AT_ONCE)
torch.set_num_threads(CORES_PER_TEST)


@pytest.fixture
def compose_config() -> Iterator:
    """compose_config(overrides) -> DictConfig, composed exactly as run.py composes it."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):

        def _compose(overrides: list[str] | None = None) -> DictConfig:
            return compose("config", overrides=overrides or [])

        yield _compose


def job_plan(*args, **kwargs):
    """A job's first run as the launcher plans it (plan_job, then ``.run()``): with the
    runtime classes of the job's task, strategy and data resolved (``plan.runtime``), so the
    workers can run it."""
    from linkbench.launcher.planning import plan_job
    from linkbench.worker.runtime import runtime_of

    return plan_job(*args, **kwargs, runtime_of=runtime_of).run()


def load_result(job_dir: Path) -> dict:
    """A job's result.json."""
    return json.loads((job_dir / "result.json").read_text())


def clean_env(gpus: bool = False, python_path: Path | None = None) -> dict[str, str]:
    """The test process's environment without NCCL or torchelastic variables, and without
    GPUs unless ``gpus`` (the CPU suite's jobs run as on a CPU box on any machine); with
    ``python_path`` first on PYTHONPATH (where the machine's own entries stay)."""
    drop = ("NCCL_", "TORCHELASTIC_", "MASTER_", "LOCAL_RANK", "RANK", "WORLD_SIZE")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", str(max(1, CORES_PER_TEST // 2)))  # a job has 2 ranks
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    if python_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(python_path), env.get("PYTHONPATH")]))
    return env


def hparams_session(job_dir: Path) -> tuple[float, float]:
    """(start, end) of this run's HParams session, in seconds since the epoch."""
    events = EventAccumulator(str(job_dir))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
    return start.session_start_info.start_time_secs, end.session_end_info.end_time_secs


def hparams_of_run(job_dir: Path) -> tuple[set[str], int]:
    """(hparam names, session end status) of this run's HParams session."""
    events = EventAccumulator(str(job_dir))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    end = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_end_info"])
    return set(start.session_start_info.hparams), end.session_end_info.status


def run_cli(
    args: list[str], timeout: float = 240, env: dict[str, str] | None = None, gpus: bool = False
) -> subprocess.CompletedProcess:
    """Run `python run.py ARGS` from the repository root, as a user would; with ``gpus``, on
    the machine's GPUs."""
    return subprocess.run(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        env=env or clean_env(gpus),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@dataclass
class Ran:
    """A command-line run shared by several tests: its output directory and process."""

    path: Path
    done: subprocess.CompletedProcess


@pytest.fixture(scope="session")
def default_job(tmp_path_factory) -> Ran:
    """The default job, shortened, with 2 repeats and a 3-step communication probe."""
    job = tmp_path_factory.mktemp("default") / "job"
    done = run_cli([*QUICK, "repeats=2", "task.no_sync_steps=3", f"hydra.run.dir={job}"])
    assert done.returncode == 0, done.stderr[-3000:]
    return Ran(job, done)


@pytest.fixture(scope="session")
def cpu_sweep(tmp_path_factory) -> Ran:
    """The committed cpu_smoke experiment as committed (2 x 2 configurations in adaptive
    rounds, at most 3: an A/A test, so all 3),
    pcie jobs first in each round, with NCCL_P2P_DISABLE=0 and NCCL_DEBUG=WARN exported as a
    user might have them."""
    sweep = tmp_path_factory.mktemp("cpu_sweep") / "sweep"
    pcie_first = "hydra.sweeper.params.interconnect='pcie,nvlink'"
    args = ["-m", "+experiment=cpu_smoke", pcie_first]
    env = clean_env() | {"NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "WARN"}
    done = run_cli([*args, f"hydra.sweep.dir={sweep}"], env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return Ran(sweep, done)


@contextlib.contextmanager
def small_disk(where: Path, size: str) -> Iterator[Path]:
    """A file system of ``size`` (tmpfs, as root) at ``where``, unmounted after; the test is
    skipped where it cannot be mounted."""
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                             capture_output=True, text=True)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
