"""The same configs under outside launchers: torchrun "nodes" and submitit's local executor."""

from __future__ import annotations

import socket
import sys
from subprocess import PIPE, Popen, TimeoutExpired

import pytest

from ..conftest import QUICK, REPO, clean_env, load_result, run_cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _torchrun(nnodes: int, port: int, args: list[str], node_rank: int | None = None) -> Popen:
    """torchrun with c10d rendezvous, or, given ``node_rank``, static rendezvous: node 0's
    agent hosts the store, the way multi-node jobs under a scheduler usually start."""
    command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}"]
    command += ["--nproc-per-node=1"]
    if node_rank is None:
        command += ["--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{port}"]
        command += ["--rdzv-id=linkbench-test"]
    else:
        command += [f"--node-rank={node_rank}", "--master-addr=localhost"]
        command += [f"--master-port={port}"]
    command += ["run.py", *args]
    return Popen(command, cwd=REPO, env=clean_env(), stdout=PIPE, stderr=PIPE, text=True)


def test_two_torchrun_nodes_run_one_job_and_rank_0_writes_it(tmp_path):
    """Two torchrun agents on localhost form one world of two "nodes" (gloo).

    Static rendezvous (node ranks given, as under SLURM): with c10d rendezvous on one host,
    an agent once lost the store in CI, and with the test's own store one agent once left
    the other waiting; both stderrs are shown when anything goes wrong."""
    port = _free_port()
    args = [*QUICK, f"hydra.run.dir={tmp_path}"]
    nodes = [_torchrun(2, port, args, node_rank=rank) for rank in range(2)]
    try:
        outputs = [node.communicate(timeout=240) for node in nodes]
    except TimeoutExpired:
        for node in nodes:
            node.kill()
        outputs = [node.communicate() for node in nodes]
    codes = [node.returncode for node in nodes]
    assert codes == [0, 0], "\n\n".join(stderr[-3000:] for _, stderr in outputs)
    result = load_result(tmp_path)
    assert result["status"] == "completed"
    assert (result["world_size"], result["nnodes"], result["global_batch"]) == (2, 2, 8)
    assert result["metrics"]["timed_steps"] == 4
    assert len(list(tmp_path.glob("result.json"))) == 1
    assert (tmp_path / "rerun.yaml").is_file() and (tmp_path / "hardware.json").is_file()


def test_torchrun_needs_one_output_directory_for_all_ranks(tmp_path):
    node = _torchrun(1, _free_port(), [*QUICK])
    _, stderr = node.communicate(timeout=240)
    assert node.returncode != 0
    assert "add hydra.run.dir=DIR" in stderr


def test_submitit_local_multirun_with_a_task_per_rank(tmp_path):
    args = ["-m", "repeats=1", "hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2"]
    args += ["seed=0,1"]
    done = run_cli([*args, *QUICK, f"hydra.sweep.dir={tmp_path}"], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [load_result(job.parent) for job in tmp_path.glob("*/result.json")]
    assert len(results) == 2
    for result in results:
        assert result["status"] == "completed"
        assert result["world_size"] == 2
    assert "2 jobs, 2 completed" in (tmp_path / "summary.md").read_text()


@pytest.mark.slow
def test_joblib_runs_a_rounds_jobs_together_when_asked_to(tmp_path):
    """hydra/launcher=joblib with hydra.sweeper.concurrent_jobs=true, the path the refusal
    names: each job starts its own world from a joblib (loky) worker process (before, every
    job failed: its ranks were told to use the worker's start method, 'loky')."""
    args = ["hydra/launcher=joblib", "hydra.sweeper.concurrent_jobs=true", "batch=2,3"]
    args += ["repeats=2"]
    done = run_cli(["-m", *QUICK[:3], *args, f"hydra.sweep.dir={tmp_path}"], timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    statuses = [load_result(job.parent)["status"] for job in tmp_path.glob("*/result.json")]
    assert statuses == ["completed"] * 4
