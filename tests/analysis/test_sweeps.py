"""Sweep summaries, noise, comparisons, experiments, exact reruns and resumable sweeps."""

from __future__ import annotations

import csv
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from linkbench.analysis.report import compare_sweeps, write_summary
from linkbench.files import RESULT_FILE, ROUNDS_FILE

from ..conftest import QUICK, REPO, clean_env, run_cli
from .fakes import fake_job


def test_summary_states_each_verdict_with_its_interval(tmp_path):
    fake_job(tmp_path, ["interconnect=nvlink", "batch=32"], [1400, 1410, 1420])
    fake_job(tmp_path, ["interconnect=pcie", "batch=32"], [1000, 1005, 1010])
    fake_job(tmp_path, ["interconnect=nvlink", "batch=64"], [2000, 2002, 2004])
    fake_job(tmp_path, ["interconnect=pcie", "batch=64"], [2001, 2003, 2005])
    fake_job(tmp_path, ["interconnect=nvlink", "batch=256"], [5000, 5100, 5200])
    fake_job(tmp_path, ["interconnect=pcie", "batch=256"], [4950, 5050, 5150])
    fake_job(tmp_path, ["interconnect=socket", "batch=256"], [], status="failed")
    text = write_summary(tmp_path)
    lines = {line.split(":")[0]: line for line in text.splitlines() if line.startswith("- at")}
    assert "1.403x [1." in lines["- at batch=32"] and "**faster**" in lines["- at batch=32"]
    assert "**equal** (within ±2%)" in lines["- at batch=64"]
    assert (
        "**inconclusive** (repeats=auto runs rounds until it is decided)" in lines["- at batch=256"]
    )
    assert "3 vs 3 runs, welch" in lines["- at batch=32"]
    geometric = statistics.geometric_mean([5000, 5100, 5200])
    assert f"interconnect=nvlink, batch=256: {geometric:,.1f} [" in text and "(3 runs)" in text
    with (tmp_path / "summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 7  # one row per configuration
    by_config = {(r["interconnect"], r["batch"]): r for r in rows}
    nvlink = by_config["nvlink", "32"]
    assert (nvlink["axis"], nvlink["baseline"], nvlink["verdict"]) == (
        "interconnect",
        "pcie",
        "faster",
    )
    assert float(nvlink["ratio_low"]) < 1410 / 1005 < float(nvlink["ratio_high"])
    assert nvlink["runs"] == "3"
    assert by_config["pcie", "32"]["verdict"] == ""  # the baseline has no comparison
    assert by_config["socket", "256"]["status"] == "failed"
    for plot in ("throughput.png", "ratios.png"):
        assert (tmp_path / plot).stat().st_size > 10_000
    assert (tmp_path / "summary.md").read_text() == text


def test_rounds_of_an_interleaved_sweep_are_paired(tmp_path):
    drift = [1.0, 1.1, 1.2]  # the machine gets faster round by round, both arms alike
    for r, d in enumerate(drift):
        fake_job(tmp_path, ["interconnect=nvlink"], [1050 * d], round_=r)
        fake_job(tmp_path, ["interconnect=pcie"], [1000 * d + r], round_=r)
    text = write_summary(tmp_path)
    line = next(line for line in text.splitlines() if "interconnect=nvlink vs pcie" in line)
    assert "3 vs 3 runs, paired" in line and "**faster**" in line


def test_any_swept_key_can_be_the_axis(tmp_path):
    for delay, runs in ((0, [100.0, 101.0, 99.0]), (5, [80.0, 81.0, 79.0])):
        fake_job(tmp_path, [f"debug.step_delay_ms={delay}", "batch=8"], runs)
    fake_job(tmp_path, ["debug.step_delay_ms=0", "batch=16"], [150.0, 151.0])
    text = write_summary(tmp_path, axis="debug.step_delay_ms", baseline="0")
    assert "## Verdicts: debug.step_delay_ms against debug.step_delay_ms=0" in text
    assert "debug.step_delay_ms=5 vs 0" in text and "**slower**" in text


def test_a_device_sweep_prints_the_scaling_table(tmp_path):
    for arm in ("nvlink", "pcie"):
        fake_job(tmp_path, [f"interconnect={arm}", "devices=1"], [1000.0, 1010.0, 990.0])
    fake_job(tmp_path, ["interconnect=nvlink", "devices=2"], [1900.0, 1920.0, 1880.0])
    fake_job(tmp_path, ["interconnect=pcie", "devices=2"], [1500.0, 1520.0, 1480.0])
    text = write_summary(tmp_path)
    assert "## Scaling with devices" in text
    table = [line for line in text.splitlines() if line.startswith("| interconnect=")]
    assert any("| 2 |" in row and "95.0% [" in row for row in table), table
    assert any("| 2 |" in row and "75.0% [" in row for row in table), table
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    two = {r["interconnect"]: float(r["scaling_efficiency"]) for r in rows if r["devices"] == "2"}
    assert two == pytest.approx({"nvlink": 0.95, "pcie": 0.75}, rel=1e-3)


def test_a_seed_sweep_is_runs_of_one_configuration(tmp_path):
    for seed, value in enumerate([900.0, 1000.0, 1100.0]):
        fake_job(tmp_path, ["interconnect=nvlink", f"seed={seed}"], [value])
    text = write_summary(tmp_path)
    geometric = statistics.geometric_mean([900.0, 1000.0, 1100.0])
    assert f"- (one configuration): {geometric:,.1f} [" in text and "samples/s (3 runs)" in text


def test_compare_two_sweeps(tmp_path):
    before, after = tmp_path / "before", tmp_path / "after"
    fake_job(before, ["batch=32"], [1000, 1010, 1020])
    fake_job(after, ["batch=32"], [1200, 1210, 1220])
    fake_job(before, ["batch=64"], [2000, 2100, 2200])
    fake_job(after, ["batch=64"], [2050, 2150, 2250])
    table = compare_sweeps(before, after)
    row32 = next(line for line in table.splitlines() if line.startswith("| batch=32"))
    assert "1,010.0 samples/s | 1,210.0 samples/s | 1.198x [" in row32 and "| faster |" in row32
    row64 = next(line for line in table.splitlines() if line.startswith("| batch=64"))
    assert row64.endswith("| inconclusive |")
    # the mean the summary's own table gives: geometric (2,098.4), not arithmetic (2,100.0)
    geometric = statistics.geometric_mean([2000, 2100, 2200])
    assert f"| {geometric:,.1f} samples/s |" in row64
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.report", str(before), str(after)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "| faster |" in done.stdout


def test_report_command_refuses_a_directory_without_jobs(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.report", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "holds no job" in done.stderr


def test_a_result_json_of_a_layout_this_linkbench_does_not_know_is_refused(tmp_path, default_job):
    """result.json says its layout (schema_version, 1 now); one without says nothing and is
    read as layout 1 (written before layouts were numbered); one of a later layout is
    refused in one sentence naming the file, not misread."""
    assert json.loads((default_job.path / RESULT_FILE).read_text())["schema_version"] == 1
    sweep = tmp_path / "sweep"
    for r in range(2):
        for arm, speed in (("nvlink", 1.5), ("pcie", 1.0)):
            fake_job(sweep, [f"interconnect={arm}"], [100 * speed * (1 + r / 100)], round_=r)
    done = _report(sweep)  # none of them says its layout
    assert done.returncode == 0, done.stderr
    later = sweep / "interconnect=pcie,round=1" / RESULT_FILE
    later.write_text(json.dumps({**json.loads(later.read_text()), "schema_version": 2}))
    done = _report(sweep)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"{later} has result layout 2, and this linkbench reads layouts 1 to 1: read it with "
        "the linkbench that wrote it (its manifest.json names the commit), or upgrade this one."
    )


def _adaptive_sweep(sweep: Path) -> None:
    """An adaptive sweep along the interconnect at two batches, 4 rounds, as its files are."""
    rng = random.Random(3)
    for r in range(4):
        for batch in (32, 64):
            for arm, speed in (("nvlink", 1.1), ("pcie", 1.0)):
                value = 1000 * speed * batch / 32 * rng.gauss(1, 0.02)
                fake_job(sweep, [f"interconnect={arm}", f"batch={batch}"], [value], round_=r)
    rounds = [{"round": r, "jobs": 4, "futile": {}} for r in range(4)]
    rounds[-1]["futile"] = {"interconnect=nvlink vs pcie at batch=32": 0.01}
    (sweep / ROUNDS_FILE).write_text(
        json.dumps({"rule": "adaptive", "max_rounds": 8, "rounds": rounds, "stopped": "x"})
    )
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  callbacks:\n    sweep_summary:\n      axis: interconnect\n"
        "      baseline: pcie\n      margin: 0.05\n      family: none\n"
    )


def _report(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "linkbench.report", *map(str, args)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_reanalysis_along_another_axis_is_written_beside_the_sweeps_own_summary(tmp_path):
    _adaptive_sweep(tmp_path)
    assert _report(tmp_path).returncode == 0  # the sweep's own, with the settings it ran with
    own = (tmp_path / "summary.md").read_text()
    assert "±5%" in own
    assert "Each comparison's 5 % error stands alone (family=none)" in own
    done = _report("--axis", "batch", "--baseline", "32", tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "summary.md").read_text() == own  # untouched
    again = (tmp_path / "reanalysis-batch" / "summary.md").read_text()
    assert "## Verdicts: batch against batch=32" in again
    assert "A re-analysis: the sweep's adaptive rounds ran for its own comparisons" in again
    assert "beyond deciding (" not in again and "Adaptive rounds:" not in again
    assert (tmp_path / "reanalysis-batch" / "summary.csv").exists()
    elsewhere = tmp_path.parent / f"{tmp_path.name}-out"
    assert _report("--margin", "0.1", "--out", elsewhere, tmp_path).returncode == 0
    assert "±10%" in (elsewhere / "summary.md").read_text()


def test_a_record_that_cannot_be_read_is_named_not_dropped(tmp_path):
    for r in range(3):
        fake_job(tmp_path, ["interconnect=nvlink"], [1100.0 + r], round_=r)
        fake_job(tmp_path, ["interconnect=pcie"], [1000.0 + r], round_=r)
    cut = tmp_path / "interconnect=pcie,round=2" / RESULT_FILE
    cut.write_text(cut.read_text()[: len(cut.read_text()) // 2])
    done = _report(tmp_path)
    assert done.returncode == 0, done.stderr
    assert "5 jobs, 5 completed." in done.stdout
    assert (
        "1 more job(s) left out: their result.json cannot be read (cut short, or not JSON): "
        "interconnect=pcie,round=2." in done.stdout
    )


def test_committed_cpu_experiment_sweeps_and_summarises_itself(cpu_sweep):
    sweep, done = cpu_sweep.path, cpu_sweep.done
    jobs = sorted(p.name for p in sweep.iterdir() if (p / "result.json").exists())
    assert len(jobs) == 12  # 2 x 2 configurations; A/A, so undecided up to max_rounds=3
    result = json.loads((sweep / jobs[0] / "result.json").read_text())
    assert (result["steps"], result["model"], result["backend"]) == (12, "tiny", "gloo")
    assert (
        "# Sweep summary" in done.stdout
        and "interconnect cannot act on these jobs (every job runs on gloo" in done.stdout
    )
    # Each round ran every configuration before the next round ran any, odd rounds reversed.
    console = (done.stdout + done.stderr).splitlines()
    order = [line.split("- job ")[1].split(":")[0] for line in console if "] - job /" in line]
    assert [name.rsplit("round=", 1)[1] for name in order] == ["0"] * 4 + ["1"] * 4 + ["2"] * 4
    assert order[4:8] == [name.replace("round=0", "round=1") for name in order[:4]][::-1]
    assert "round 1 of at most 3: 0 of 2 comparisons decided; round 2 runs 4 job(s)" in (
        done.stdout + done.stderr
    )
    assert "Adaptive rounds: 3 round(s) of at most 3; stopped: max_rounds=3 reached" in done.stdout
    # From the second job on, the time left (between the fewest and the most rounds, which
    # the committed experiment makes equal: min_rounds = max_rounds = 3)
    pattern = r"job 2 \(\d+ s elapsed, adaptive round 1: about \d+ s left\)"
    assert re.search(pattern, done.stdout + done.stderr)
    # An A/A test: the interconnect arms run the same gloo code. Its verdicts are judged
    # alone, in the slow study below: beside another test on 2 cores, one arm can share
    # its rounds with a heavier neighbour than the other.
    verdicts = [line for line in done.stdout.splitlines() if "interconnect=nvlink vs pcie" in line]
    assert len(verdicts) == 2, done.stdout
    assert all("3 vs 3 runs, sequential" in v for v in verdicts), verdicts
    assert "group-sequential design looking from round 3 to at most 3" in done.stdout
    for name in ("summary.csv", "summary.md", "throughput.png", "comm_fraction.png", "ratios.png"):
        assert (sweep / name).is_file(), name
    # What TensorBoard shows of it: tests/analysis/test_tensorboard_review.py
    events = EventAccumulator(str(sweep / jobs[0]))
    events.Reload()
    assert "custom_scalars__config__" in events.Tags()["tensors"]


def test_a_failed_job_still_gets_its_row_and_the_summary_is_printed(tmp_path):
    crash = ["debug.crash_at_step=null,4", "devices=1", *QUICK[:3]]
    done = run_cli(["-m", "repeats=1", *crash, f"hydra.sweep.dir={tmp_path}"], timeout=300)
    assert done.returncode != 0
    assert "the first: rank 0 failed first: RuntimeError: debug.crash_at_step=4" in done.stderr
    assert "# Sweep summary" in done.stdout and "2 jobs, 1 completed" in done.stdout
    assert re.search(r"job 1/2 \(\d+ s elapsed\): ", done.stdout + done.stderr)  # fixed: one round
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
    # Each setting once: DDP's live on the strategy, not also in their old, empty places.
    saved = yaml.safe_load((first / "rerun.yaml").read_text())
    assert "ddp" not in saved and "comm_hook" not in saved
    assert saved["strategy"]["bucket_cap_mb"] == 25.0
    assert saved["strategy"]["comm_hook"]["name"] == "none"


@pytest.mark.slow
def test_two_sweeps_started_in_the_same_second_get_their_own_directories(tmp_path):
    quick = ["steps=2", "untimed_steps=1", "log_every=1", "batch=2", "repeats=1"]
    command = [sys.executable, str(REPO / "run.py"), "-m", *quick, "eval.enabled=false"]
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
    done_job = sweep / "batch=8,interconnect=nvlink,round=0"
    redo_job = sweep / "batch=8,interconnect=pcie,round=1"
    kept = (done_job / "result.json").read_text()
    interrupted = json.loads((redo_job / "result.json").read_text()) | {"status": "interrupted"}
    (redo_job / "result.json").write_text(json.dumps(interrupted))
    # the record of a sweep that ran 3 rounds, as if it had been cut after round 2's start
    record = json.loads((sweep / ROUNDS_FILE).read_text())
    ran = len(record["rounds"])
    args = ["-m", "+experiment=cpu_smoke", f"hydra.sweep.dir={sweep}", "resume=true"]
    again = run_cli(args, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (done_job / "result.json").read_text() == kept
    assert json.loads((redo_job / "result.json").read_text())["status"] == "completed"
    console = again.stdout + again.stderr
    assert console.count("already completed (samples_per_sec ") == 11
    assert console.count("done: ") == 1  # only the job that ran says it is done
    assert len(json.loads((sweep / ROUNDS_FILE).read_text())["rounds"]) >= ran  # only grows
    assert f"Adaptive rounds: {ran} round(s)" in (sweep / "summary.md").read_text()


def test_an_arm_left_with_one_run_gets_no_verdict_and_a_failed_job_no_headline(tmp_path):
    """The sweep of a killed worker: one arm kept one run of two, the other two of two."""
    fake_job(tmp_path, ["interconnect=nvlink"], [1539.0], round_=0)
    fake_job(tmp_path, ["interconnect=nvlink"], [2419.4], status="failed", round_=1)
    fake_job(tmp_path, ["interconnect=pcie"], [1000.0], round_=0)
    fake_job(tmp_path, ["interconnect=pcie"], [1010.0], round_=1)
    text = write_summary(tmp_path, plots=False)
    verdict = next(line for line in text.splitlines() if "interconnect=nvlink vs pcie" in line)
    assert "**inconclusive** (too few runs for an interval" in verdict
    assert "1 vs 2 runs" in verdict
    failed_row = next(line for line in text.splitlines() if "| failed |" in line)
    assert "2419.4" not in failed_row and "2,419.4" not in failed_row


def test_a_comparison_counts_the_rounds_it_paired_not_its_runs(tmp_path):
    """Rounds that do not line up (a failed job on one side): 4 runs each, 3 rounds paired;
    the futility check and the 'stopped after N rounds' text read the pairs."""
    from linkbench.analysis.compare import sweep_comparisons
    from linkbench.analysis.sweep import load_sweep

    for round_, value in enumerate([1000.0, 1010.0, 990.0, 1005.0]):
        fake_job(tmp_path, ["interconnect=nvlink"], [value], round_=round_)
    for round_, value in [(0, 1000.0), (1, 1003.0), (3, 998.0), (4, 1001.0)]:
        fake_job(tmp_path, ["interconnect=pcie"], [value], round_=round_)
    fake_job(tmp_path, ["interconnect=pcie"], [], status="failed", round_=2)
    comparison = sweep_comparisons(load_sweep(tmp_path)).comparisons[0]
    assert comparison.ratio.runs == (4, 4) and comparison.ratio.method == "paired"
    assert comparison.pairs == 3


def test_a_probe_mark_goes_wherever_its_number_does(tmp_path):
    """The jobs table and summary.csv carry the probe's mark beside exposed communication."""
    bias = "a bias of this probe: the no_sync steps took 6.140 ms longer"
    noise = "below this probe's noise: +0.1 ms [-0.2, +0.4]"
    for round_ in range(3):
        for arm, note in (("nvlink", bias), ("pcie", noise)):
            extra = {"comm_fraction": -0.225, "comm_exposed_note": note}
            fake_job(tmp_path, [f"interconnect={arm}"], [1000.0 + round_], round_=round_,
                     extra=extra)  # fmt: skip
    text = write_summary(tmp_path, plots=False)
    rows = [line for line in text.splitlines() if "| completed |" in line]
    assert rows and all("-22.5% (" in row for row in rows)
    assert any("(a bias of this probe)" in r for r in rows)
    assert any("(below this probe's noise)" in r for r in rows)
    marks = {r["interconnect"]: r["comm_exposed_mark"] for r in csv.DictReader(
        (tmp_path / "summary.csv").open())}  # fmt: skip
    assert marks == {"nvlink": "a bias of this probe", "pcie": "below this probe's noise"}


def _a_a_winners(sweep: Path) -> list[str]:
    args = ["-m", "+experiment=cpu_smoke", "hydra.callbacks.sweep_summary.family=bonferroni"]
    done = run_cli([*args, f"hydra.sweep.dir={sweep}"], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = [line for line in done.stdout.splitlines() if "interconnect=nvlink vs pcie" in line]
    assert len(verdicts) == 2, done.stdout
    return [v for v in verdicts if "**faster**" in v or "**slower**" in v]


@pytest.mark.slow
def test_the_committed_a_a_sweep_names_no_winner(tmp_path):
    """The committed cpu_smoke experiment, alone on the machine, with its two verdicts held
    together (family=bonferroni): a false winner in at most 5 % of sweeps by design, so one
    is retried once and two in a row (at most 0.25 %) fail the test; an arm that really
    differs would name a winner every time."""
    winners = _a_a_winners(tmp_path / "first")
    if winners:
        winners = _a_a_winners(tmp_path / "second")
    assert not winners, winners


def test_a_sweep_of_one_key_is_compared_along_it_and_says_so(tmp_path):
    """Before: `python run.py -m batch=8,16` ended "0 of 0 comparisons decided", no hint."""
    for batch, runs in ((8, [100.0, 101.0, 99.0]), (16, [150.0, 152.0, 149.0])):
        for r, value in enumerate(runs):
            fake_job(tmp_path, [f"batch={batch}"], [value], round_=r)
    text = write_summary(tmp_path, plots=False)
    assert "## Verdicts: batch against batch=8" in text
    assert "Compared along batch, the one key this sweep varies" in text
    assert "batch=16 vs 8" in text and "**faster**" in text


def test_a_sweep_of_several_keys_says_how_to_choose_its_axis(tmp_path):
    for batch in (8, 16):
        for lr in ("0.1", "0.2"):
            fake_job(tmp_path, [f"batch={batch}", f"base_lr={lr}"], [100.0, 101.0])
    text = write_summary(tmp_path, plots=False)
    assert "No comparisons: this sweep varies batch, base_lr" in text
    assert "hydra.callbacks.sweep_summary.axis=KEY" in text


def test_a_comparison_that_lost_runs_and_one_with_no_run_say_so(tmp_path):
    for r in range(3):
        fake_job(tmp_path, ["interconnect=pcie", "batch=8"], [100.0 + r], round_=r)
        lost = r == 1
        fake_job(tmp_path, ["interconnect=nvlink", "batch=8"], [] if lost else [100.5 + r],
                 status="failed" if lost else "completed", round_=r)  # fmt: skip
        fake_job(tmp_path, ["interconnect=pcie", "batch=16"], [150.0 + r], round_=r)
        fake_job(tmp_path, ["interconnect=nvlink", "batch=16"], [], status="failed", round_=r)
    text = write_summary(tmp_path, plots=False)
    line = next(x for x in text.splitlines() if x.startswith("- at batch=8:"))
    assert (
        "1 run(s) lost, their jobs failed or were stopped: batch=8,interconnect=nvlink,round=1"
        in line
    )
    assert "2 vs 2 runs" in line or "2 vs 3 runs" in line
    none = next(x for x in text.splitlines() if x.startswith("- at batch=16:"))
    assert "**no verdict**: interconnect=nvlink, batch=16 has no completed run (3 job(s)" in none
    assert "## Jobs that did not complete" in text


def _unverified(job: Path, reason: str) -> None:
    result = json.loads((job / "result.json").read_text())
    result["transport"] = {"transport": "emulated link (NET)", "verified": False, "reason": reason}
    (job / "result.json").write_text(json.dumps(result))


def test_a_run_whose_transport_was_not_verified_counts_in_no_figure_and_no_verdict(tmp_path):
    """A run that did not measure what its arm says (an emulated link that did not shape it,
    NCCL off the arm's path) is left out, and the verdict says which and why. Its value here
    (10x the others) would otherwise make the arm faster."""
    why = "the link probe read 0.2 GB/s, 167.3% of the 0.1196 GB/s ...: a measurement error"
    for r in range(3):
        fake_job(tmp_path, ["interconnect=pcie", "batch=8"], [100.0 + r], round_=r)
        job = fake_job(tmp_path, ["interconnect=nvlink", "batch=8"],
                       [1000.0 if r == 1 else 100.5 + r], round_=r)  # fmt: skip
        if r == 1:
            _unverified(job, why)
        fake_job(tmp_path, ["interconnect=pcie", "batch=16"], [150.0 + r], round_=r)
        _unverified(fake_job(tmp_path, ["interconnect=nvlink", "batch=16"], [300.0], round_=r),
                    "rank 0 had no connection to another node")  # fmt: skip
    text = write_summary(tmp_path, plots=False)
    line = next(x for x in text.splitlines() if x.startswith("- at batch=8:"))
    assert "2 vs 3 runs" in line and "**faster**" not in line, line
    assert f"1 job(s) not verified, left out: batch=8,interconnect=nvlink,round=1: {why}" in line
    none = next(x for x in text.splitlines() if x.startswith("- at batch=16:"))
    assert "**no verdict**: interconnect=nvlink, batch=16 has no run whose transport was " in none
    assert "3 job(s) not verified, left out" in none and "no connection to another node" in none
    mean = next(x for x in text.splitlines() if x.startswith("- interconnect=nvlink, batch=8:"))
    assert "1,000" not in mean and "1000" not in mean


def test_a_launch_bound_configuration_is_named_with_the_way_out(tmp_path):
    def gpu(busy: float, execution: str = "eager") -> dict:
        return {"device_type": "cuda", "execution": execution, "hw": {"gpu_util_pct_mean": busy}}

    fake_job(tmp_path, ["batch=32"], [1500, 1510, 1520], fields=gpu(41.0))
    fake_job(tmp_path, ["batch=256"], [4600, 4610, 4620], fields=gpu(98.5))
    fake_job(tmp_path, ["batch=16"], [900, 910, 920], fields=gpu(40.0, "cuda_graphs"))
    text = write_summary(tmp_path)
    section = text.split("## Launch-bound configurations")[1].split("##")[0]
    assert "cuda_graphs=true" in section
    assert "- batch=32: the GPU busy 41 % of the timed steps" in section
    assert "batch=256" not in section and "batch=16" not in section
    fake = tmp_path / "cpu"
    fake_job(fake, ["batch=32"], [1500, 1510, 1520])  # no GPU counters: nothing said
    assert "Launch-bound" not in write_summary(fake)


def test_two_runs_are_too_few_for_an_interval_and_the_summary_says_so(tmp_path):
    """Two runs' t-interval (one degree of freedom) spans orders of magnitude: the summary
    names the runs and what to do, not a bound such as 1,003,132 samples/s."""
    fake_job(tmp_path, ["interconnect=nvlink"], [1000, 3000])
    fake_job(tmp_path, ["interconnect=pcie"], [1000, 1005, 1010])
    text = write_summary(tmp_path)
    line = next(line for line in text.splitlines() if line.startswith("- interconnect=nvlink:"))
    assert "(2 runs: too few for an interval; use repeats=3 or more)" in line
    assert "[" not in line and "inf" not in text
    three = next(line for line in text.splitlines() if line.startswith("- interconnect=pcie:"))
    assert "[" in three and three.endswith("(3 runs)")  # three runs keep their interval
