"""What answers at once stays light: `run.py --help` and `--cfg job` compose and print
without importing torch (before, 3-6 s of torch and a CUDA device query), importing
`linkbench.report` loads neither torch, scipy nor matplotlib (scipy loads when an interval
is first computed), and the plan imports no torch and no worker module."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..conftest import REPO, clean_env


def _run(arguments: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [sys.executable, *arguments],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def _imported(arguments: list[str]) -> set[str]:
    done = _run(["-X", "importtime", *arguments])
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[1].strip() for line in lines}


@pytest.mark.parametrize("arguments", [["--help"], ["--cfg", "job"]])
def test_run_py_answers_help_and_cfg_without_torch(arguments):
    modules = _imported(["run.py", *arguments])
    assert "hydra" in modules  # it did compose
    assert "torch" not in modules


def test_importing_the_report_loads_no_torch_scipy_or_matplotlib():
    modules = _imported(["-c", "import linkbench.report"])
    assert "linkbench.analysis.report" in modules
    assert not {"torch", "scipy", "matplotlib"} & modules


def test_registering_the_sweeper_loads_nothing_a_sweep_uses():
    """Hydra imports the sweeper plugin on every compose, to register it: that loads
    linkbench's sweep defaults alone, not numpy, the analysis, the plan or the stop
    handling (before: all of them, about 170 ms)."""
    modules = _imported(["-c", "import hydra_plugins.linkbench_sweeper.rounds_sweeper"])
    assert "hydra_plugins.linkbench_sweeper.rounds_sweeper" in modules
    ours = {m for m in modules if m.startswith(("linkbench", "numpy", "scipy", "torch"))}
    assert ours == {"linkbench", "linkbench.sweep_defaults"}, ours


PLAN_EVERY_OPTION = """
import sys
import tempfile
from pathlib import Path

from hydra import compose, initialize_config_dir

from linkbench.config.machine import Machine
from linkbench.launcher.planning import plan_job
from linkbench.config.registry import options, register
from PIL import Image

register(project_root=Path({repo!r}))
with initialize_config_dir(config_dir={conf!r}, version_base="1.3"):
    # strategy=hsdp needs two replicas: two GPUs, one replica on each; data from a folder
    # needs the folder
    root = Path(tempfile.mkdtemp())
    (root / "cat").mkdir()
    for i in range(80):
        Image.new("RGB", (4, 4)).save(root / "cat" / f"{{i}}.png")
    extra = {{
        "strategy=hsdp": ["strategy.replicas=2"],
        "data=imagefolder": [f"data.root={{root}}"],
        "data=cifar10": [f"data.root={{root}}", "data.download=true"],
    }}
    jobs = [[f"{{group}}={{name}}"] for group, named in options().items() for name in named]
    jobs = [job + extra.get(job[0], []) for job in jobs]
    composed = [(job, compose("config", overrides=job)) for job in jobs]
    before = set(sys.modules)
    for job, cfg in composed:
        gpus = 2 if job[0] == "strategy=hsdp" else 1
        plan_job(cfg, "/tmp/plan", job, Machine(cuda_devices=gpus))
print(" ".join(sorted(set(sys.modules) - before)))
"""


def test_planning_imports_no_torch_and_no_worker_for_any_built_in_option():
    """The plan checks every built-in task, strategy and data option by its option's
    dataclass (linkbench.config.tasks, .strategies, .data), never by importing its runtime
    class; the
    runtime classes (and torch) are the workers' (before, 23 worker and parts modules)."""
    done = _run(["-c", PLAN_EVERY_OPTION.format(repo=str(REPO), conf=str(REPO / "conf"))])
    imported = done.stdout.split()
    heavy = ("torch", "linkbench.worker", "linkbench.parts", "linkbench.launcher")
    assert not [m for m in imported if m.startswith(heavy)], imported
