"""The same configs under outside launchers: torchrun "nodes" and submitit's local executor."""

from __future__ import annotations

import socket
import subprocess
import sys

from torch.distributed import TCPStore

from ..conftest import QUICK, REPO, clean_env, load_result, run_cli


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _torchrun(nnodes: int, port: int, args: list[str], rdzv_conf: str = "") -> subprocess.Popen:
    command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nnodes}"]
    command += ["--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{port}"]
    command += [f"--rdzv-conf={rdzv_conf}"] if rdzv_conf else []
    command += ["--rdzv-id=linkbench-test", "run.py", *args]
    pipe = subprocess.PIPE
    return subprocess.Popen(command, cwd=REPO, env=clean_env(), stdout=pipe, stderr=pipe, text=True)


def test_two_torchrun_nodes_run_one_job_and_rank_0_writes_it(tmp_path):
    """Two torchrun agents on localhost form one world of two "nodes" (gloo).

    The rendezvous store is this test's, bound before the agents start: the run then depends
    neither on a port picked free and released nor on which agent hosts the store and when
    it leaves (once in CI an agent lost the store: RendezvousConnectionError)."""
    store = TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    args = [*QUICK, f"hydra.run.dir={tmp_path}"]
    nodes = [_torchrun(2, store.port, args, rdzv_conf="is_host=false") for _ in range(2)]
    outputs = [node.communicate(timeout=240) for node in nodes]
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
