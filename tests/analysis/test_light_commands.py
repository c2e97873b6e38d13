"""The commands that read a job's files start without torch or Hydra (the import contracts in
pyproject.toml keep the analysis free of them; this checks the commands as users run them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "hydra", "torchvision")


@pytest.mark.parametrize(
    "module",
    ["linkbench.project", "linkbench.report", "linkbench.nccl_log", "linkbench.analysis.trace"],
)
def test_the_command_starts_without_torch_or_hydra(module):
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "--help"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0 and "usage" in done.stdout.lower(), done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))
