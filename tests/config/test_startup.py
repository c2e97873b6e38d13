"""What answers at once stays light: `run.py --help` and `--cfg job` compose and print
without importing torch (before, 3-6 s of torch and a CUDA device query), and importing
`linkbench.report` loads neither torch, scipy nor matplotlib (scipy loads when an interval
is first computed)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ..conftest import REPO, clean_env


def _imported(arguments: list[str]) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *arguments],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
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
