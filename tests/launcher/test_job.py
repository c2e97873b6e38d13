"""Real jobs through `python run.py`: 2-rank gloo training, a 2x2 sweep, failures, bad input."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2

from linkbench.files import SWEEP_RUN
from linkbench.launcher.hparams import FINAL_METRICS

from ..conftest import QUICK, REPO, clean_env, hparams_of_run, hparams_session, load_result, run_cli

EXPECTED_SCALARS = {
    "train/loss",
    "train/lr",
    "perf/samples_per_sec",
    "perf/samples_per_sec_per_device",
    "perf/step_time_ms",
}


def event_dirs(root: Path) -> set[Path]:
    return {p.parent for p in root.rglob("events.out.tfevents.*")}


def test_default_job_trains_two_gloo_ranks_and_logs_everything(default_job):
    job, done = default_job.path, default_job.done
    result = load_result(job)
    assert result["status"] == "completed"
    assert (result["world_size"], result["backend"], result["interconnect"]) == (2, "gloo", "auto")
    assert result["overrides"] == [*QUICK, "repeats=2", "task.no_sync_steps=3"]
    metrics = result["metrics"]
    assert metrics["timed_steps"] == 4
    assert metrics["samples_per_sec"] > 0
    assert metrics["samples_per_sec_per_device"] == pytest.approx(metrics["samples_per_sec"] / 2)
    assert metrics["step_time_ms"] > 0
    assert metrics["final_loss"] == pytest.approx(metrics["final_loss"])  # not NaN
    # Two fresh runs of the measurement; the headline is their median.
    runs = [m["samples_per_sec"] for m in result["repeat_metrics"]]
    assert len(runs) == 2 and metrics["samples_per_sec"] == pytest.approx(sum(runs) / 2)
    # What the machine was doing at each run's start and end (the job sees no GPU: it says why).
    assert len(result["conditions"]) == 2
    start = result["conditions"][0]["start"]
    assert start["load_1m"] >= 0 and start["cpus"] >= 1 and "gpus_unavailable" in start
    # TensorBoard: one run (the job directory itself), with the scalars, config and hparams.
    assert event_dirs(job.parent) == {job}
    events = EventAccumulator(str(job))
    events.Reload()
    assert set(events.Tags()["scalars"]) >= EXPECTED_SCALARS
    assert [e.step for e in events.Scalars("perf/step_time_ms")] == [4, 6]  # first run only
    assert [e.step for e in events.Scalars("repeats/samples_per_sec")] == [0, 1]
    assert "config/text_summary" in events.Tags()["tensors"]
    names, status = hparams_of_run(job)
    assert {"backend", "interconnect", "batch", "global_batch", "precision", "lr"} <= names
    assert status == api_pb2.STATUS_SUCCESS
    started, ended = hparams_session(job)  # the session spans the job: two runs of steps
    assert ended - started >= result["duration_s"] - 1.0 > 0
    held_out = {"final/eval_loss", "final/eval_accuracy"}
    finals = set(FINAL_METRICS.values()) - held_out - {
        "final/mfu", "final/busbw_gb_s_peak", "final/link_busbw_gb_s", "final/node_busbw_gb_s"
    }  # fmt: skip
    probe = {"final/comm_exposed_ms", "final/comm_fraction"}
    marked = bool(metrics.get("comm_exposed_note"))  # below the probe's noise: no figure
    assert set(events.Tags()["scalars"]) >= finals - (probe if marked else set())
    assert marked != (probe <= set(events.Tags()["scalars"]))
    # Synthetic data's labels cannot be learnt: no held-out evaluation, and the job says so.
    assert not held_out & set(events.Tags()["scalars"]) and "eval_loss" not in metrics
    assert "no held-out evaluation (data=synthetic: its labels cannot be learnt" in (
        done.stdout + done.stderr
    )
    # The probe describes the configuration: its first run measures it, the second does not.
    first, second = result["repeat_metrics"]
    assert "no_sync_steps" in first and "no_sync_steps" not in second
    # Per-rank logs in the job directory (later runs in logs/repeat<N>); rank 0 on the console.
    for logs in (job / "logs", job / "logs" / "repeat1"):
        assert {p.name for p in logs.iterdir()} >= {
            "rank0.stderr.log",
            "rank1.stderr.log",
            "rank0.stdout.log",
            "rank1.stdout.log",
        }
    assert "step 6/6" in (job / "logs" / "rank0.stderr.log").read_text()
    console = done.stdout + done.stderr
    assert "[rank0]" in console and "[rank1]" not in console


def test_sweep_runs_each_job_in_its_own_directory_with_its_own_env(cpu_sweep):
    sweep = cpu_sweep.path
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    assert [p.name for p in jobs] == [
        f"batch={batch},interconnect={arm},round={r}"
        for batch in (16, 8)
        for arm in ("nvlink", "pcie")
        for r in (0, 1, 2)
    ]
    # One TensorBoard run per job, beside the sweep's own (its summary, a row per configuration).
    assert {d for d in event_dirs(sweep) if SWEEP_RUN not in d.parts} == set(jobs)
    for job in jobs:
        result = load_result(job)
        assert result["status"] == "completed"
        arm = result["interconnect"]
        assert f"interconnect={arm}" in job.name
        seen = result["worker_nccl_env"]
        assert result["env_inherited_nccl"] == {"NCCL_DEBUG": "WARN"}
        assert seen["NCCL_DEBUG"] == "WARN"  # the user's own NCCL_DEBUG is left alone
        if arm == "pcie":
            assert result["env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
            assert result["env_replaced"] == {"NCCL_P2P_DISABLE": "0"}  # reported, then replaced
            assert seen == result["env"] | {"NCCL_DEBUG": "WARN"}
        else:
            # nvlink ran after pcie in this process: nothing of pcie's may be left behind.
            assert result["env"] == {"NCCL_P2P_DISABLE": "0"}
            assert result["env_replaced"] == {}
            assert seen == {"NCCL_P2P_DISABLE": "0", "NCCL_DEBUG": "WARN"}
        assert any("no effect on backend=gloo" in note for note in result["notes"])
        assert result["transport"]["transport"] == "gloo"
        assert result["transport"]["verified"] is None
        # The communication probe in round 0 only: it describes the configuration.
        assert ("no_sync_steps" in result["metrics"]) == (result["round"] == 0), job.name
        # Not a row of its own: the sweep's rows are its configurations.
        events = EventAccumulator(str(job))
        events.Reload()
        assert not [t for t in events.Tags()["tensors"] if t.startswith("_hparams_/")], job
    assert "NCCL_P2P_DISABLE=0 exported in the environment is replaced" in cpu_sweep.done.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["batch=0"], "batch=0 must be a positive per-device batch"),
        (["backend=nccl"], "backend=nccl needs CUDA GPUs"),
        (["data=cifar10"], "data.root is not set"),
        (["model=nosuchmodel"], "model=nosuchmodel is not an option; choose one of"),
        (["steps=ten"], "steps=ten is not a whole number"),
    ],
)
def test_bad_input_exits_nonzero_with_one_sentence_and_no_worker(tmp_path, args, words):
    started = time.monotonic()
    done = run_cli([*args, f"hydra.run.dir={tmp_path}"], timeout=60)
    assert done.returncode != 0
    assert words in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "logs").exists(), "no worker may start on bad input"
    assert time.monotonic() - started < 60
    if (tmp_path / "result.json").exists():
        assert load_result(tmp_path)["status"] == "failed"


OUTSIDE_MODEL = '''
import torch
from torch import nn


class WideMLP(nn.Module):
    """A model linkbench has never seen, in a package of the user's own."""

    def __init__(self, width: int, num_classes: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.LazyLinear(width), nn.ReLU(),
                                 nn.Linear(width, num_classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)
'''


def test_a_model_from_outside_the_package_trains_from_one_yaml_file(tmp_path):
    package = tmp_path / "lab" / "my_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "mlp.py").write_text(OUTSIDE_MODEL)
    conf = tmp_path / "conf" / "model"
    conf.mkdir(parents=True)
    (conf / "wide_mlp.yaml").write_text(
        "name: wide_mlp\n_target_: my_models.mlp.WideMLP\n"
        "kwargs: {width: 64, num_classes: 7}\ninput: image\nimage_size: 8\nnum_classes: 7\n"
        "base_lr: 0.05\n"
    )
    job = tmp_path / "job"
    env = clean_env(python_path=tmp_path / "lab")
    args = ["--config-dir", str(tmp_path / "conf"), "model=wide_mlp", *QUICK]
    done = run_cli([*args, f"hydra.run.dir={job}"], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(job)
    assert (result["status"], result["model"]) == ("completed", "wide_mlp")
    assert result["metrics"]["final_loss"] > 0
    assert result["metrics"]["flops_per_sample"] > 0
    rerun = (job / "rerun.yaml").read_text()
    assert "my_models.mlp.WideMLP" in rerun


def test_profile_trace_writes_a_trace_per_rank_and_its_breakdown(tmp_path):
    job = tmp_path / "job"
    args = [*QUICK, "profile=trace", "profile.steps=3", "nvtx=true", f"hydra.run.dir={job}"]
    done = run_cli(args)
    assert done.returncode == 0, done.stderr[-3000:]
    # On CPU the profiler's library says nothing alarming: no ERROR about GPUs it looked for
    console = done.stdout + done.stderr
    assert "gpuGetDeviceCount" not in console and "USDT:" not in console
    result = load_result(job)
    traces = sorted((job / "traces").iterdir())
    assert [p.name for p in traces] == ["rank0.json.gz", "rank1.json.gz"]
    assert result["trace"]["files"] == [str(p) for p in traces]
    for rank in result["trace"]["ranks"]:
        assert rank["device"] == "cpu" and rank["steps"] == 3
        assert rank["comm_events"] > 0, "gloo's collectives are visible"
        assert 0 < rank["compute_ms"] < rank["step_ms"]
    assert result["hw"]["available"] is False  # no GPU: the block says why
    events = EventAccumulator(str(job))
    events.Reload()
    assert "trace/rank1/exposed_comm_ms" in events.Tags()["scalars"]


def test_a_terminal_shows_a_progress_bar_instead_of_rank_0s_lines(tmp_path):
    """Under a pseudo-terminal (as a person at a shell) the job draws a bar."""
    import os
    import pty
    import sys

    chunks: list[bytes] = []

    def read(fd: int) -> bytes:
        data = os.read(fd, 4096)
        chunks.append(data)
        return data

    command = [sys.executable, "run.py", *QUICK, "steps=10", f"hydra.run.dir={tmp_path}"]
    env = clean_env()
    saved = dict(os.environ)
    os.chdir(REPO)
    try:
        os.environ.clear()
        os.environ.update(env)
        status = pty.spawn(command, read)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    console = b"".join(chunks).decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, console[-2000:]
    assert "10/10" in console and "step/s" in console, console[-2000:]
    assert "[rank0]" not in console


def test_a_sweep_says_job_k_its_round_and_its_wall_time(cpu_sweep):
    console = cpu_sweep.done.stdout + cpu_sweep.done.stderr
    assert re.search(r"job 1 \(\d+ s elapsed, adaptive round 1\): ", console)
    assert re.search(r"job 12 \(\d+ s elapsed, adaptive round 3[:)]", console)
    assert re.search(r"round 2 of at most 3: .* round 3 runs 4 job\(s\), about \d+ s", console)
    assert "sweep wall time" in console and "timed training steps" in console


@pytest.mark.slow
def test_compile_caches_survive_between_the_jobs_of_a_sweep(tmp_path):
    args = [
        "-m",
        "repeats=1",
        "seed=0,1",
        "compile=true",
        "steps=8",
        "untimed_steps=4",
        "log_every=4",
    ]
    args += ["task.no_sync_steps=0", "eval.enabled=false", f"hydra.sweep.dir={tmp_path}"]
    done = run_cli(args, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = (
        load_result(p.parent)["metrics"] for p in sorted(tmp_path.glob("*/result.json"))
    )
    assert first["compile_cache"]["dir"] == str(tmp_path / ".compile_cache")
    assert first["compile_cache"]["fxgraph_misses"] > 0
    assert (
        second["compile_cache"]["fxgraph_hits"] > 0
        and second["compile_cache"]["fxgraph_misses"] == 0
    )
    assert second["first_step_s"] < first["first_step_s"] / 2


def test_every_second_of_a_job_is_given_to_a_phase(default_job):
    """Where the time goes, in result.json and on the console (issue: 4 s per job that nothing
    printed accounted for): the phases of both runs sum to the job's wall time."""
    result = load_result(default_job.path)
    phases = result["phases_s"]
    assert {"planning", "process_start", "rendezvous", "set_up", "timed_steps", "probe",
            "teardown", "record"} <= set(phases)  # fmt: skip
    assert all(seconds >= 0 for seconds in phases.values())
    assert abs(sum(phases.values()) - result["duration_s"]) < 0.05
    assert phases["timed_steps"] < result["duration_s"]
    line = next(x for x in default_job.done.stdout.splitlines() if "- time: " in x)
    assert f"time: {result['duration_s']:.1f} s: planning " in line and "timed steps" in line


def test_a_sweep_says_where_its_time_went(cpu_sweep):
    console = cpu_sweep.done.stdout
    line = next(x for x in console.splitlines() if "where it went, of " in x)
    assert "timed steps" in line and "the sweep's own (Hydra, planning, summaries)" in line
    summary = (cpu_sweep.path / "summary.md").read_text()
    assert "## Where the jobs' time went" in summary and "| process start |" in summary
