"""What a job does once rather than again: the parts' model check once per model in a
process, the workers' forkserver started where the job begins (and never outliving it), the
probe and a random label's evaluation in a configuration's first run only."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from linkbench.config.machine import Machine
from linkbench.launcher import forkserver, parts_check
from linkbench.launcher.parts_check import check_parts
from linkbench.launcher.planning import plan_job

from ..conftest import REPO, clean_env

CPU = Machine(cuda_devices=0)


def test_the_model_is_checked_once_per_model_and_input(compose_config, monkeypatch, tmp_path):
    built = []
    real = parts_check._check_model

    def counted(c, states):
        built.append(c.model.name)
        return real(c, states)

    monkeypatch.setattr(parts_check, "_MODELS", {})
    monkeypatch.setattr(parts_check, "_check_model", counted)

    def config(*overrides: str):
        return plan_job(compose_config(list(overrides)), str(tmp_path), [], CPU).config

    first = check_parts(config("batch=8"), 0.1)
    again = check_parts(config("batch=64"), 0.1)
    assert built == ["tiny"]  # the batch does not change the model's build
    assert again.flops_per_sample == first.flops_per_sample
    assert again.memory_bytes_per_rank > first.memory_bytes_per_rank  # its own batch's share
    check_parts(config("model=resnet18"), 0.1)
    assert built == ["tiny", "resnet18"]


@pytest.mark.parametrize(
    ("environ", "starts"),
    [
        ({}, True),
        ({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
          "MASTER_ADDR": "h"}, False),  # torchrun: each rank runs in place
        ({"SUBMITIT_EXECUTOR": "slurm"}, False),  # a submitit task: maybe one rank of many
    ],
)  # fmt: skip
def test_the_forkserver_starts_early_only_where_this_process_launches(monkeypatch, environ, starts):
    started = []
    monkeypatch.setattr(forkserver, "start", lambda: started.append(True))
    forkserver.start_early(environ)
    assert bool(started) == starts


def _tagged(tag: str) -> list[int]:
    """Live processes whose environment holds ``tag``."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if tag.encode() in environ.read_bytes():
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_a_refused_job_leaves_no_forkserver_behind(tmp_path):
    """The forkserver starts before the plan (its imports run beside it); a plan that
    refuses ends it with the process, though it is still importing torch."""
    tag = f"LINKBENCH_TEST_TAG={uuid.uuid4().hex}"
    env = clean_env() | dict([tag.split("=")])
    done = subprocess.run(
        [sys.executable, "run.py", "data=cifar10", f"hydra.run.dir={tmp_path / 'job'}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "data.root is not set" in done.stderr
    deadline = time.monotonic() + 5
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _tagged(tag) == [], "a process of the refused job outlived it"
    assert os.getpid() not in _tagged(tag)
