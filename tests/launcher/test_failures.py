"""Failures: a crashing, killed or stopped rank ends its job promptly with a record, a
sweep runs on past a failed job, and no process is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.distributed.checkpoint import FileSystemReader

from linkbench.files import failure_file
from linkbench.launcher.failures import first_failure

from ..conftest import QUICK, REPO, alive, clean_env, load_result, run_cli
from ..conftest import small_disk as mounted_small_disk


def _children(parent: int) -> list[tuple[int, bytes]]:
    """(pid, command line) of the live children of ``parent``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent:
            found.append((int(stat.parent.name), cmdline))
    return found


def _worker_pids(run_py: int) -> list[int]:
    """PIDs of a job's workers: the children of run.py's multiprocessing forkserver."""
    servers = [pid for pid, cmdline in _children(run_py) if b"forkserver" in cmdline]
    return sorted(pid for server in servers for pid, _ in _children(server))


def _start_long_job(job: Path) -> subprocess.Popen:
    args = ["steps=100000", "untimed_steps=1", "log_every=1", "batch=2", f"hydra.run.dir={job}"]
    return subprocess.Popen(
        [sys.executable, "run.py", *args],
        cwd=REPO,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_metrics(process: subprocess.Popen, job: Path, at_least_step: int = 3) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        partial = job / "metrics.json"
        if partial.exists() and json.loads(partial.read_text())["step"] >= at_least_step:
            return
        assert process.poll() is None, process.communicate()[1][-3000:]
        time.sleep(0.2)
    process.kill()
    pytest.fail("the job never wrote metrics.json")


def _running_workers(process: subprocess.Popen, job: Path) -> list[int]:
    """The two workers of a long job, once it has measured a few steps."""
    _wait_for_metrics(process, job)
    workers = _worker_pids(process.pid)
    assert len(workers) == 2
    return workers


def _gone(pids: list[int], within_s: float = 10.0) -> bool:
    """No process in ``pids`` is alive within ``within_s`` seconds (the forkserver notices
    that its parent ended on its next read, which a loaded machine may delay)."""
    deadline = time.monotonic() + within_s
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _loss_steps(job: Path) -> list[int]:
    events = EventAccumulator(str(job))
    events.Reload()
    return [e.step for e in events.Scalars("train/loss")]


@pytest.mark.slow
def test_a_launcher_stopped_mid_step_waits_for_its_ranks_with_a_bound(tmp_path):
    """SIGTERM to run.py while its ranks are inside a compute-bound step of seconds (resnet50
    at 224 px on CPU; Python's signal handler runs only when the step's kernels return): the
    launcher passes the signal on and exits only once its ranks have, within the elastic
    agent's shutdown timeout (30 s; then it kills them)."""
    job = tmp_path / "job"
    args = ["model=resnet50", "batch=32", "steps=100", "untimed_steps=1", "log_every=1"]
    args += ["data.image_size=224", "eval.enabled=false", "task.no_sync_steps=0"]
    process = subprocess.Popen(
        [sys.executable, "run.py", *args, f"hydra.run.dir={job}"],
        cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_metrics(process, job, at_least_step=2)
        workers = _worker_pids(process.pid)
        assert len(workers) == 2
        time.sleep(2)  # inside the next step
        stopped_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=90)
        took = time.monotonic() - stopped_at
        left = [pid for pid in workers if alive(pid)]
    finally:
        process.kill()
    assert not left, f"ranks {left} outlived their launcher"
    assert took < 45, took
    assert load_result(job)["status"] == "interrupted"


def test_killed_worker_fails_the_job_and_keeps_what_was_measured(tmp_path):
    job = tmp_path / "job"
    process = _start_long_job(job)
    try:
        workers = _running_workers(process, job)
        os.kill(workers[-1], signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 1
    # The console shows the lines that matter: rank 0 says in one line that a peer left (no
    # gloo traceback), the job names the rank that failed first; no Hydra lines around it.
    # ("rank 0 stopped: another rank left the job (...)", or, when the launcher stopped it
    # before its collective failed, "rank 0 stopped: stopped by SIGTERM")
    assert "rank 0 stopped: " in stderr
    assert "Traceback" not in stderr and "HYDRA_FULL_ERROR" not in stderr
    result = load_result(job)
    assert result["status"] == "failed"
    assert result["failed_rank"] == 1
    # The launcher reports the SIGKILL when it sees it first; otherwise the silence is the sign.
    assert "rank 1 failed first: " in result["error"]
    assert "SIGKILL" in result["error"] or "killed from outside" in result["error"]
    # kill -9 of a small rank is no out-of-memory kill, and the job does not guess one
    error = result["error"]
    assert (
        "not the out-of-memory killer, by the evidence: this cgroup counted no OOM kill" in error
        or "nothing shows it ran out of memory" in error
    )
    assert "lower batch" not in result["error"]
    assert result["metrics"]["timed_steps"] >= 2, "the steps measured before the failure are kept"
    assert "rank 1 failed first" in stdout + stderr
    assert _gone(workers)
    # rank 0's traceback is kept for whoever wants it, in its failure record
    assert "Traceback" in json.loads(failure_file(job / "logs", 0).read_text())["traceback"]


def test_workers_of_a_killed_launcher_end_themselves_within_seconds(tmp_path):
    """kill -9 of run.py leaves its workers nobody to report to, waiting on a dead store:
    each notices its launcher is gone and ends (before, they ran on for minutes)."""
    job = tmp_path / "job"
    process = _start_long_job(job)
    try:
        workers = _running_workers(process, job)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
        process.stdout.close()
        process.stderr.close()
    assert _gone(workers, within_s=15), "the workers outlived their launcher"
    # The first rank to notice says why; the other may instead see its peer go.
    logs = [(job / "logs" / f"rank{r}.stderr.log").read_text() for r in (0, 1)]
    assert any("the launching process" in text and "is gone" in text for text in logs)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_stopped_job_says_so_flushes_tensorboard_and_leaves_no_process(tmp_path, signum):
    job = tmp_path / "job"
    process = _start_long_job(job)
    try:
        workers = _running_workers(process, job)
        server = [pid for pid, cmd in _children(process.pid) if b"forkserver" in cmd]
        stopped_at = time.monotonic()
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=120)
    finally:
        process.kill()
    assert time.monotonic() - stopped_at < 40, "every rank stops promptly"
    assert process.returncode != 0
    result = load_result(job)
    assert result["status"] == "interrupted"
    assert result["metrics"]["timed_steps"] >= 2
    assert max(_loss_steps(job)) >= 3, "rank 0's TensorBoard events were flushed"
    assert _gone(workers + server)
    if signum == signal.SIGTERM:
        assert "stopped by SIGTERM" in stderr and "Traceback" not in stderr
        assert process.returncode == 128 + signum and "HYDRA_FULL_ERROR" not in stderr


def test_a_crashing_rank_fails_its_job_and_the_sweep_runs_on(tmp_path):
    crash = ["debug.crash_rank=1", "steps=8", "log_every=2", "untimed_steps=2", "batch=4"]
    args = ["-m", "repeats=1", "debug.crash_at_step=5,null", *crash, f"hydra.sweep.dir={tmp_path}"]
    done = run_cli(args, timeout=240)
    assert done.returncode != 0, "a sweep with a failed job exits non-zero"
    crashed = load_result(next(tmp_path.glob("*debug.crash_at_step=5,*")))
    assert crashed["status"] == "failed"
    assert crashed["failed_rank"] == 1
    assert "rank 1 failed first: RuntimeError: debug.crash_at_step=5" in crashed["error"]
    assert crashed["metrics"]["timed_steps"] >= 2
    assert load_result(next(tmp_path.glob("*debug.crash_at_step=null,*")))["status"] == "completed"
    assert "the first: rank 1 failed first" in done.stderr.strip().splitlines()[-1]
    assert "Error executing job" not in done.stderr, "the sweep's own line, not Hydra's"
    summary = (tmp_path / "summary.md").read_text()
    assert "2 jobs, 1 completed" in summary and "| failed |" in summary


def test_non_finite_loss_stops_the_job_naming_step_and_rank(tmp_path):
    gpt = [
        "model=gpt",
        "model.kwargs.n_layer=1",
        "model.kwargs.d_model=32",
        "model.kwargs.n_head=2",
    ]
    gpt += ["model.seq_len=16", "model.vocab_size=64", "base_lr=1e30"]
    done = run_cli([*gpt, *QUICK, f"hydra.run.dir={tmp_path}"])
    assert done.returncode != 0
    result = load_result(tmp_path)
    assert result["status"] == "failed"
    assert "non-finite loss (nan) in steps 1-2 on rank" in result["error"]


class _Exit:
    def __init__(self, exitcode: int) -> None:
        self.exitcode = exitcode


@pytest.mark.parametrize(
    ("files", "failures", "after_s", "expected"),
    [
        # rank 1 raised first; rank 0 then lost its peer.
        ({0: (2.0, False), 1: (1.0, False)}, {0: 1}, 1, (1, "own error 1")),
        # rank 2 was killed with SIGKILL from outside; the others lost it, or were stopped.
        ({0: (1.0, False), 1: (1.1, True)}, {0: 1, 2: -9}, 1, (2, "killed by SIGKILL")),
        # rank 2 vanished without a word before the launcher could have killed it.
        ({0: (1.0, False), 1: (1.2, True)}, {0: 1, 2: 0}, 5, (2, "killed from outside")),
        # past the launcher's grace period a silent rank may be one the launcher killed.
        ({0: (1.0, False), 1: (1.2, True)}, {0: 1, 2: -9}, 60, (0, "own error 0")),
        # nobody recorded anything: the lowest failed rank, with its exit code.
        ({}, {1: 1, 0: 1}, 1, (0, "exit code 1 before it could record")),
    ],
)
def test_first_failure_orders_the_ranks(tmp_path, files, failures, after_s, expected):
    for rank, (at, stopped) in files.items():
        record = {"time": at, "error": f"own error {rank}", "stopped": stopped}
        (tmp_path / f"failure.rank{rank}.json").write_text(json.dumps(record))
    exits = {rank: _Exit(code) for rank, code in failures.items()}
    world_size = max([*files, *failures]) + 1
    rank, reason = first_failure(exits, tmp_path, world_size, ended_at=1.0 + after_s)
    assert rank == expected[0]
    assert expected[1] in reason


def test_a_rank_the_launcher_did_not_list_is_not_blamed(tmp_path):
    """Rank 0 raised after rank 1 had finished its part and ended well: the launcher lists
    rank 0 alone. Before, rank 1 was named first, "killed from outside", with a guess of the
    out-of-memory killer (an outside task whose rank 0 failed logging a metric)."""
    record = {"time": 1.0, "error": "KeyError: barrier_us", "stopped": False, "peer_left": False}
    (tmp_path / "failure.rank0.json").write_text(json.dumps(record))
    for world_size in (2, 4):
        assert first_failure({0: _Exit(1)}, tmp_path, world_size, ended_at=1.5) == (
            0, "KeyError: barrier_us"
        )  # fmt: skip
    # Where rank 0 only lost its peer, the silent rank the launcher did not list is the one
    # that left (killed with SIGKILL before the launcher saw it end).
    lost = {**record, "error": "RuntimeError: Connection closed by peer", "peer_left": True}
    (tmp_path / "failure.rank0.json").write_text(json.dumps(lost))
    rank, reason = first_failure({0: _Exit(1)}, tmp_path, 2, ended_at=1.5)
    assert rank == 1 and "killed from outside" in reason


@pytest.mark.slow  # about 30 s on 2 cores; .ci/run runs it
def test_resume_continues_a_crashed_job_from_its_checkpoint(tmp_path):
    """The resumed job ends exactly where an uninterrupted one does, and its TensorBoard
    curve continues at the checkpoint's step. The DataLoader's data (5 batches per rank and
    epoch) puts the checkpoint inside the second epoch, so the data position is restored."""
    job = ["steps=12", "log_every=2", "untimed_steps=2", "batch=4", "checkpoint.every_steps=6"]
    job += ["task.no_sync_steps=0", "data=fake", "data.size=40", "data.num_workers=0"]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert run_cli([*job, f"hydra.run.dir={whole}"]).returncode == 0
    crashed = run_cli([*job, "debug.crash_at_step=9", f"hydra.run.dir={resumed}"])
    assert crashed.returncode != 0
    recorded = json.loads((resumed / "checkpoint.json").read_text())
    assert (recorded["step"], recorded["dir"]) == (6, "checkpoint/step-6")
    assert sorted(recorded["files"]) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    done = run_cli([*job, "resume=true", f"hydra.run.dir={resumed}"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "continues from its checkpoint of step 6" in done.stdout + done.stderr
    assert "raises on purpose" not in done.stderr, "the killed run's log is kept aside"
    assert (resumed / "logs" / "previous1" / "rank0.stderr.log").is_file()
    result = load_result(resumed)
    assert result["status"] == "completed"
    assert result["metrics"]["resumed_from_step"] == 6
    assert result["metrics"]["final_loss"] == load_result(whole)["metrics"]["final_loss"]
    assert _loss_steps(resumed) == [2, 4, 6, 8, 10, 12]


@pytest.mark.slow
def test_resume_over_a_damaged_checkpoint_starts_over_and_keeps_it_aside(tmp_path):
    job = ["steps=8", "log_every=2", "untimed_steps=2", "batch=4", "checkpoint.every_steps=4"]
    job += ["task.no_sync_steps=0", f"hydra.run.dir={tmp_path}"]
    crashed = run_cli([*job, "debug.crash_at_step=7"])
    assert crashed.returncode != 0
    saved = tmp_path / "checkpoint" / "step-4"
    assert sorted(p.name for p in saved.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    shard = max(saved.glob("*.distcp"), key=lambda p: p.stat().st_size)
    shard.write_bytes(shard.read_bytes()[:1000])  # a disk that filled up, a copy cut short
    done = run_cli([*job, "resume=true"])
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr
    assert f"step-4 is damaged ({shard.name}: 1,000 bytes" in console
    assert "starts over from step 0" in console
    assert "Traceback" not in console
    aside = tmp_path / "checkpoint" / "step-4.damaged"
    assert (aside / shard.name).stat().st_size == 1000
    result = load_result(tmp_path)
    assert result["status"] == "completed"
    assert "resumed_from_step" not in result["metrics"]
    assert any("damaged" in note for note in result["notes"])


@pytest.mark.slow
def test_a_job_killed_whole_resumes_from_its_last_checkpoint_as_if_never_killed(tmp_path):
    """SIGKILL to the launcher and its workers at once (a lost node, the OOM killer) at any
    moment, during a checkpoint's write or not: the resumed job continues from the last
    checkpoint checkpoint.json names and ends bit for bit where an uninterrupted one does;
    what the killed write left is removed."""
    job = ["steps=40", "log_every=2", "untimed_steps=2", "batch=4", "checkpoint.every_steps=2"]
    job += ["task.no_sync_steps=0", "data=fake", "data.size=40", "data.num_workers=0"]
    job += ["eval.enabled=false"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert run_cli([*job, f"hydra.run.dir={whole}"]).returncode == 0
    process = subprocess.Popen(
        [sys.executable, "run.py", *job, f"hydra.run.dir={killed}"], cwd=REPO, env=clean_env(),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while (json.loads(p.read_text())["step"] if (p := killed / "checkpoint.json").exists()
               else 0) < 10:  # fmt: skip
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # somewhere in the next steps or checkpoints
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    step = json.loads((killed / "checkpoint.json").read_text())["step"]
    assert 10 <= step < 40
    done = run_cli([*job, "resume=true", f"hydra.run.dir={killed}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(killed)
    assert result["metrics"]["resumed_from_step"] == step
    assert result["metrics"]["final_loss"] == load_result(whole)["metrics"]["final_loss"]
    assert [p.name for p in (killed / "checkpoint").iterdir()] == ["step-38"]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp", "zero1"])
def test_a_sharded_job_resumes_from_its_checkpoint_where_it_would_have_ended(tmp_path, strategy):
    job = ["steps=12", "log_every=2", "untimed_steps=2", "batch=4", "checkpoint.every_steps=6"]
    job += [f"strategy={strategy}", "task.no_sync_steps=0"]
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    assert run_cli([*job, f"hydra.run.dir={whole}"]).returncode == 0
    assert run_cli([*job, "debug.crash_at_step=9", f"hydra.run.dir={resumed}"]).returncode != 0
    done = run_cli([*job, "resume=true", f"hydra.run.dir={resumed}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(resumed)
    assert (result["strategy"], result["metrics"]["resumed_from_step"]) == (strategy, 6)
    assert result["metrics"]["final_loss"] == load_result(whole)["metrics"]["final_loss"]
    # Each rank wrote its own part: FSDP every parameter's shard (one chunk per rank), ZeRO-1
    # the optimizer state of its partition (each parameter's in one rank's file).
    metadata = FileSystemReader(resumed / "checkpoint" / "step-6").read_metadata()
    if strategy == "fsdp":
        stored = metadata.state_dict_metadata.items()  # parameters, not BatchNorm's buffers
        params = {k: v for k, v in stored if k.startswith("model.") and k.endswith("weight")}
        assert params and all(len(v.chunks) == 2 for v in params.values())
    else:
        files: dict[str, set[str]] = {}
        for index, stored in metadata.storage_data.items():
            if index.fqn.startswith("optimizer.state."):
                files.setdefault(index.fqn.rsplit(".", 1)[0], set()).add(stored.relative_path)
        assert {f for where in files.values() for f in where} == {"__0_0.distcp", "__1_0.distcp"}
        assert all(len(where) == 1 for where in files.values())


@pytest.fixture
def small_disk(tmp_path):
    """A 120 KB file system (tmpfs, as root), removed after the test."""
    with mounted_small_disk(tmp_path / "disk", "120k") as disk:
        yield disk


def test_a_full_disk_ends_the_job_in_one_sentence_and_keeps_what_fits(small_disk):
    """A checkpoint that does not fit (resnet18's 45 MB in 120 KB): one line from the rank,
    one sentence naming the directory and the bytes free, exit 1, result.json kept, no
    temporary file left (before: OSError tracebacks, no result.json, three .tmp files)."""
    job = small_disk / "job"
    args = ["steps=6", "untimed_steps=2", "log_every=2", "checkpoint.every_steps=2"]
    done = run_cli([*args, "model=resnet18", f"hydra.run.dir={job}"], timeout=240)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{job} filled up (") and "bytes free); result.json was kept" in last
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert load_result(job)["status"] == "failed"
    assert not [p.name for p in job.rglob(".*.tmp")]


def test_a_timeout_names_the_rank_that_stopped_responding_not_the_one_that_waited(tmp_path):
    """Rank 0's collective timed out (its own error, recorded first) while waiting for rank
    1, whose heartbeat had stopped: rank 1 is the one named, with the timeout and its key."""
    waited = {"1": "no heartbeat for 21 s (the last from step 7); its process is stopped"}
    record = {
        "time": 1.0,
        "error": "RuntimeError: Timed out waiting 20000ms for recv",
        "stopped": False,
        "peer_left": False,
        "waited_for": waited,
        "timeout_s": 20.0,
    }
    (tmp_path / "failure.rank0.json").write_text(json.dumps(record))
    rank, reason = first_failure({0: _Exit(1), 1: _Exit(-9)}, tmp_path, 2, ended_at=40.0)
    assert rank == 1
    assert reason.startswith("it stopped responding: no heartbeat for 21 s")
    assert (
        "Rank 0 waited for it in a collective until its timeout fired (dist_timeout_s=20 s)"
        in reason
    )
    # Without the heartbeat's word, the waiter's own error stands, as before.
    (tmp_path / "failure.rank0.json").write_text(json.dumps({**record, "waited_for": {}}))
    assert first_failure({0: _Exit(1), 1: _Exit(-9)}, tmp_path, 2, ended_at=40.0)[0] == 0


@pytest.mark.slow  # about 45 s: the timeout, then the launcher's 30 s grace for a stopped rank
def test_a_rank_stopped_from_outside_is_named_when_the_timeout_fires(tmp_path):
    job = tmp_path / "job"
    process = subprocess.Popen(
        [sys.executable, "run.py", "steps=100000", "untimed_steps=1", "log_every=1", "batch=2",
         "dist_timeout_s=5", f"hydra.run.dir={job}"],
        cwd=REPO, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for_metrics(process, job)
        stopped = _worker_pids(process.pid)[-1]
        os.kill(stopped, signal.SIGSTOP)
        _, err = process.communicate(timeout=150)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 1, err[-2000:]
    result = load_result(job)
    hung = result["failed_rank"]
    assert not failure_file(job / "logs", hung).exists()  # it could say nothing itself
    assert f"rank {hung} failed first: it stopped responding: no heartbeat for" in result["error"]
    assert "its process is stopped (SIGSTOP" in result["error"]
    assert "dist_timeout_s=5 s" in result["error"]
    assert "Traceback" not in err
