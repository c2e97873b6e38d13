"""Sweep summaries, noise, comparisons, experiments, exact reruns and resumable sweeps."""

from __future__ import annotations

import csv
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from linkbench.analysis.report import compare, write_summary

from ..conftest import QUICK, REPO, clean_env, run_cli


def fake_job(sweep: Path, overrides: list[str], runs: list[float], status: str = "completed"):
    """A job directory with a result.json as linkbench writes it (samples/s per repeat)."""
    job = sweep / ",".join(sorted(overrides))
    job.mkdir(parents=True)
    repeat_metrics = [{"samples_per_sec": v, "step_time_ms": 1e3 / v} for v in runs]
    result = {
        "status": status,
        "task": "train",
        "backend": "nccl",
        "overrides": overrides,
        "metrics": repeat_metrics[len(runs) // 2] if runs else {},
        "transport": {"transport": "P2P", "verified": True},
    }
    if len(runs) > 1:
        result["repeat_metrics"] = repeat_metrics
    (job / "result.json").write_text(json.dumps(result))
    return job


def test_summary_names_winners_and_noise(tmp_path):
    fake_job(tmp_path, ["interconnect=nvlink", "batch=32"], [1400, 1410, 1420])
    fake_job(tmp_path, ["interconnect=pcie", "batch=32"], [1000, 1005, 1010])
    fake_job(tmp_path, ["interconnect=nvlink", "batch=256"], [5000, 5100, 5200])
    fake_job(tmp_path, ["interconnect=pcie", "batch=256"], [4950, 5050, 5150])
    fake_job(tmp_path, ["interconnect=socket", "batch=256"], [], status="failed")
    text = write_summary(tmp_path)
    assert "at batch=32: nvlink is 1.40x pcie" in text
    assert "at batch=256: the difference is within the noise" in text
    assert "interconnect=nvlink, batch=256: 5,100.0 [5,000.0-5,200.0] samples/s (3 runs)" in text
    with (tmp_path / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 5
    by_job = {(r["interconnect"], r["batch"]): r for r in rows}
    assert float(by_job["nvlink", "32"]["speedup_vs_pcie"]) == pytest.approx(1410 / 1005)
    assert by_job["nvlink", "256"]["within_noise"] == "True"
    assert by_job["socket", "256"]["status"] == "failed"
    assert (tmp_path / "throughput.png").stat().st_size > 10_000
    assert (tmp_path / "summary.md").read_text() == text


def test_a_seed_sweep_is_repeats_of_one_configuration(tmp_path):
    for seed, value in enumerate([900.0, 1000.0, 1100.0]):
        fake_job(tmp_path, ["interconnect=nvlink", f"seed={seed}"], [value])
    text = write_summary(tmp_path)
    assert "- (one configuration): 1,000.0 [900.0-1,100.0] samples/s (3 runs)" in text


def test_compare_two_sweeps(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    fake_job(before, ["batch=32"], [1000, 1010, 1020])
    fake_job(after, ["batch=32"], [1200, 1210, 1220])
    fake_job(before, ["batch=64"], [2000, 2100, 2200])
    fake_job(after, ["batch=64"], [2050, 2150, 2250])
    table = compare(before, after)
    assert "| batch=32 | 1,010.0 samples/s | 1,210.0 samples/s | 1.20 | B faster |" in table
    assert "| batch=64 |" in table and "within noise" in table
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.report", str(before), str(after)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "B faster" in done.stdout


def test_report_command_refuses_a_directory_without_jobs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "holds no job" in done.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def read_hparams_with_tensorboard(logdir: Path) -> tuple[dict, dict]:
    """(experiment, session groups) as TensorBoard's own server loads them from logdir."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port),
         "--host", "127.0.0.1", "--load_fast=false", "--reload_interval=1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}/data/plugin/hparams"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                groups = _post(
                    f"{base}/session_groups",
                    {"experimentName": "", "startIndex": 0, "sliceSize": 100,
                     "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE",
                                         "STATUS_RUNNING"]},
                )  # fmt: skip
                if groups.get("totalSize"):
                    return _post(f"{base}/experiment", {"experimentName": ""}), groups
            except OSError:
                pass
            assert time.monotonic() < deadline, "TensorBoard never served the hparams"
            time.sleep(1)
    finally:
        server.kill()
        server.wait()


def test_committed_cpu_experiment_sweeps_and_summarises_itself(cpu_sweep):
    sweep, done = cpu_sweep.path, cpu_sweep.done
    jobs = sorted(p.name for p in sweep.iterdir() if (p / "result.json").exists())
    assert len(jobs) == 4
    result = json.loads((sweep / jobs[0] / "result.json").read_text())
    assert (result["steps"], result["model"], result["backend"]) == (12, "tiny", "gloo")
    assert "# Sweep summary" in done.stdout and "no effect" in done.stdout
    for name in ("summary.csv", "summary.md", "throughput.png", "comm_fraction.png"):
        assert (sweep / name).is_file(), name
    experiment, groups = read_hparams_with_tensorboard(sweep)
    assert groups["totalSize"] == 4
    differs = {h["name"] for h in experiment["hparamInfos"] if h["differs"]}
    assert differs == {"batch", "interconnect", "global_batch", "lr"}
    metrics = {m["name"]["tag"] for m in experiment["metricInfos"]}
    assert "final/samples_per_sec" in metrics and "final/comm_fraction" in metrics
    for group in groups["sessionGroups"]:
        values = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        assert values["final/samples_per_sec"] > 0
    events = EventAccumulator(str(sweep / jobs[0]))
    events.Reload()
    assert "custom_scalars__config__" in events.Tags()["tensors"]


def test_a_failed_job_still_gets_its_row_and_the_summary_is_printed(tmp_path):
    args = ["-m", "batch=4,0", "devices=1", *QUICK[:3], f"hydra.sweep.dir={tmp_path}"]
    done = run_cli(args, timeout=300)
    assert done.returncode != 0
    assert "batch=0 must be a positive" in done.stderr
    assert "# Sweep summary" in done.stdout and "2 jobs, 1 completed" in done.stdout
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert sorted(r["status"] for r in rows) == ["completed", "failed"]


def test_rerun_from_saved_config_is_bit_identical(default_job, tmp_path):
    first, second = default_job.path, tmp_path / "second"
    rerun = ["--config-path", str(first), "--config-name", "rerun", f"hydra.run.dir={second}"]
    done = run_cli([*rerun, "repeats=1"])  # the first run writes the loss curve
    assert done.returncode == 0, done.stderr[-3000:]

    def losses(job: Path) -> list[tuple[int, float]]:
        events = EventAccumulator(str(job))
        events.Reload()
        return [(e.step, e.value) for e in events.Scalars("train/loss")]

    assert losses(first) == losses(second)
    assert len(losses(first)) == 3
    manifest = json.loads((first / "manifest.json").read_text())
    assert len(manifest["git"]["commit"]) == 40 and isinstance(manifest["git"]["dirty"], bool)
    assert manifest["seed"] == 0 and manifest["config"]["seed"] == 0
    assert {"python", "torch", "hydra", "host"} <= set(manifest["versions"])
    assert json.loads((second / "result.json").read_text())["world_size"] == 2


def test_two_sweeps_started_in_the_same_second_get_their_own_directories(tmp_path):
    command = [sys.executable, str(REPO / "run.py"), "-m", "batch=0"]
    starts = [
        subprocess.Popen(command, cwd=tmp_path, env=clean_env(), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
        for _ in range(2)
    ]  # fmt: skip
    for process in starts:
        process.wait(timeout=120)
    sweeps = list((tmp_path / "outputs" / "multirun").iterdir())
    assert len(sweeps) == 2


def test_resume_skips_completed_jobs_and_reruns_the_rest(cpu_sweep, tmp_path):
    sweep = tmp_path / "sweep"  # a copy: the shared sweep stays as its other tests expect
    shutil.copytree(cpu_sweep.path, sweep)
    done_job = sweep / "batch=8,interconnect=nvlink,repeats=1"
    redo_job = sweep / "batch=8,interconnect=pcie,repeats=1"
    kept = (done_job / "result.json").read_text()
    interrupted = json.loads((redo_job / "result.json").read_text()) | {"status": "interrupted"}
    (redo_job / "result.json").write_text(json.dumps(interrupted))
    args = ["-m", "+experiment=cpu_smoke", "repeats=1", f"hydra.sweep.dir={sweep}", "resume=true"]
    again = run_cli(args, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (done_job / "result.json").read_text() == kept
    assert json.loads((redo_job / "result.json").read_text())["status"] == "completed"
    console = again.stdout + again.stderr
    assert console.count("already completed; skipping") == 3
