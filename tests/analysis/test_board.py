"""The sweep's TensorBoard run, on sweeps whose answer the test chose, read back by
TensorBoard's own server: the rows, their order and verdicts, figures that do not stand
left out, a re-analysis without rows, and a running TensorBoard kept current."""

from __future__ import annotations

import json
import math

import pytest

from linkbench.analysis.board import BASELINE, TEXT_TAG, VERDICT
from linkbench.analysis.report import main as report_main
from linkbench.analysis.report import write_summary
from linkbench.files import SWEEP_RUN
from linkbench.launcher.callbacks import round_ended
from linkbench.launcher.hparams import custom_scalars
from linkbench.metrics import NOISE, honest

from ..tensorboard_view import TensorBoard, tensorboard, wait_for
from .fakes import fake_job

MARKED = {  # the probe could not measure it: its interval holds 0
    "comm_exposed_ms": -3.0, "comm_exposed_ms_low": -8.0, "comm_exposed_ms_high": 2.0,
    "comm_exposed_windows": 4, "comm_fraction": -0.2,
    "comm_exposed_note": f"{NOISE}: -3.000 ms [-8.000, +2.000] over 4 alternating windows",
}  # fmt: skip
MEASURED = {"comm_exposed_ms": 4.0, "comm_exposed_ms_low": 3.0, "comm_exposed_ms_high": 5.0,
            "comm_exposed_windows": 4, "comm_fraction": 0.25}  # fmt: skip


def rows(board: TensorBoard) -> dict[str, dict]:
    """name -> (hparams, metric values) of every HParams row."""
    return {
        g["name"]: {**g["hparams"], **{m["name"]["tag"]: m["value"] for m in g["metricValues"]}}
        for g in board.groups()
    }


def test_honest_leaves_out_marked_probe_figures_negative_times_and_non_numbers():
    assert honest({**MARKED, "samples_per_sec": 10.0}) == {
        "samples_per_sec": 10.0, "comm_exposed_ms_low": -8.0, "comm_exposed_ms_high": 2.0,
        "comm_exposed_windows": 4.0,
    }  # fmt: skip
    assert honest(MEASURED)["comm_fraction"] == 0.25
    assert honest({"step_time_ms": -1.0, "epoch_time_s": math.inf, "own": 3, "x": "y"}) == {
        "own": 3.0
    }


def test_each_configuration_is_a_row_in_the_summarys_order_with_its_verdict(tmp_path):
    for batch, (fast, slow) in {"8": (1400, 1000), "64": (2000, 2001)}.items():
        fake_job(tmp_path, ["interconnect=nvlink", f"batch={batch}"],
                 [fast, fast + 10, fast + 20], extra=MEASURED)  # fmt: skip
        fake_job(tmp_path, ["interconnect=pcie", f"batch={batch}"],
                 [slow, slow + 5, slow + 10], extra=MARKED)  # fmt: skip
    write_summary(tmp_path)
    with tensorboard(tmp_path, lambda b: len(b.groups()) == 4) as board:
        found = rows(board)
        experiment = board.experiment()
        texts = board.get("data/plugin/text/tags")
    # in the summary's order (batch 8 before 64, though "64" < "8" as text), named by it
    assert list(found) == [
        "1: interconnect=nvlink, batch=8", "2: interconnect=nvlink, batch=64",
        "3: interconnect=pcie, batch=8", "4: interconnect=pcie, batch=64",
    ]  # fmt: skip
    faster, equal, base = found["1: interconnect=nvlink, batch=8"], found[
        "2: interconnect=nvlink, batch=64"], found["3: interconnect=pcie, batch=8"]  # fmt: skip
    assert (faster[VERDICT], equal[VERDICT], base[VERDICT]) == ("faster", "equal", BASELINE)
    assert (faster["batch"], faster["interconnect"]) == ("8", "nvlink")  # as written
    assert faster["sweep/ratio"] == pytest.approx(1410 / 1005, rel=1e-3)
    assert faster["sweep/ratio_low"] < faster["sweep/ratio"] < faster["sweep/ratio_high"]
    assert faster["sweep/samples_per_sec"] == pytest.approx((1400 * 1410 * 1420) ** (1 / 3))
    assert faster["sweep/comm_fraction"] == pytest.approx(0.25)
    assert "sweep/ratio" not in base  # the baseline is compared against, not compared
    assert "sweep/comm_fraction" not in base and "sweep/comm_exposed_ms" not in base  # noise
    names = [m["name"]["tag"] for m in experiment["metricInfos"]]
    assert names[:6] == ["sweep/samples_per_sec", "sweep/step_time_ms", "sweep/ratio",
                         "sweep/ratio_low", "sweep/ratio_high", "sweep/comm_fraction"]  # fmt: skip
    assert [h["name"] for h in experiment["hparamInfos"]] == ["batch", "interconnect", VERDICT]
    assert list(texts.values()) == [[TEXT_TAG]]


def test_a_running_tensorboard_shows_the_newest_summary_alone(tmp_path):
    """Each write is a run of its own (TensorBoard keeps a run's first hyperparameters), the
    older removed: a TensorBoard left open follows the sweep round by round."""
    fake_job(tmp_path, ["interconnect=pcie"], [1000, 1010, 1020])
    job = fake_job(tmp_path, ["interconnect=nvlink"], [1001, 1011, 1019])
    write_summary(tmp_path)
    arm = "1: interconnect=nvlink"  # the summary orders configurations by their settings
    with tensorboard(tmp_path, lambda b: arm in rows(b)) as board:
        assert rows(board)[arm][VERDICT] in ("equal", "inconclusive")
        result = json.loads((job / "result.json").read_text())
        for run, value in zip(result["repeat_metrics"], (1400, 1410, 1420), strict=True):
            run["samples_per_sec"] = value
        (job / "result.json").write_text(json.dumps(result))  # the same jobs, another answer
        write_summary(tmp_path)
        wait_for("the new verdict", lambda: rows(board)[arm][VERDICT] == "faster" or None)
        runs = [r for r in board.get("data/runs") if r.count("/") == 1]
        wait_for("the old run gone", lambda: runs == [f"{SWEEP_RUN}/2-jobs-v2"] or None)
    assert [p.name for p in (tmp_path / SWEEP_RUN).iterdir()] == ["2-jobs-v2"]


def test_a_reanalysis_has_its_text_and_plots_and_no_rows_of_its_own(tmp_path):
    for batch in (8, 16):
        for arm, value in (("nvlink", 1400), ("pcie", 1000)):
            fake_job(tmp_path, [f"interconnect={arm}", f"batch={batch}"], [value, value + 9])
    write_summary(tmp_path)
    assert report_main([str(tmp_path), "--axis", "batch", "--baseline", "8"]) == 0
    again = tmp_path / "reanalysis-batch" / SWEEP_RUN
    assert [p.name for p in again.iterdir()] == ["4-jobs"]
    assert [p for p in (again / "4-jobs").iterdir() if p.is_dir()] == []  # no sessions
    with tensorboard(tmp_path, lambda b: len(b.groups()) == 4) as board:
        assert len(board.experiment()["metricInfos"]) > 5  # the sweep's own, not the other's
        assert TEXT_TAG in board.get("data/plugin/text/tags")["reanalysis-batch/_summary/4-jobs"]


def test_a_chart_is_laid_out_only_where_the_job_has_its_series():
    cpu = {"samples_per_sec": 10.0, "samples_per_sec_per_device": 5.0, "step_time_ms": 3.0}
    layout = custom_scalars({**cpu, **MARKED}, {"metrics": {**cpu, **MARKED}})
    charts = {title for category in layout.values() for title in category}
    assert charts == {"samples/s (global)", "samples/s per device", "ms/step"}  # no MFU, noise
    gpu = {**cpu, "mfu": 0.4, **MEASURED, "link_busbw_gb_s": 0.06}
    layout = custom_scalars(gpu, {"metrics": gpu, "collectives": [{"op": "all_gather"}]})
    assert layout["throughput"]["model FLOPs utilisation"] == ["Multiline", ["^perf/mfu$"]]
    assert layout["communication"]["emulated link busbw GB/s"] == [
        "Multiline", ["^final/link_busbw_gb_s$", "^final/node_busbw_gb_s$"]
    ]  # fmt: skip
    assert layout["throughput"]["all_gather busbw GB/s by log2(bytes)"] == [
        "Multiline", ["^collectives/all_gather/busbw_gb_s$"]
    ]  # fmt: skip
    # the median stands but the first run (whose series rank 0 wrote) was marked: no chart
    layout = custom_scalars(MARKED, {"metrics": MEASURED})
    assert "communication" not in layout
    # a chart lists all its series, so every job's layout draws it alike (merged once)
    without_probe = custom_scalars(cpu, {"metrics": cpu})
    assert without_probe["step time"] == custom_scalars(gpu, {"metrics": gpu})["step time"]


def test_a_round_ends_when_its_last_job_has_a_record(tmp_path):
    done = [{"round": 0}, {"round": 0}, {"round": 1}]
    assert round_ended(0, done, tmp_path, per_round=2)
    assert not round_ended(1, done, tmp_path, per_round=2)
    assert not round_ended(None, done, tmp_path, per_round=2)
    (tmp_path / "rounds.json").write_text(json.dumps({"rounds": [{"jobs": 2}, {"jobs": 1}]}))
    assert round_ended(1, done, tmp_path, per_round=None)  # adaptive: as many as it started
    assert not round_ended(2, done, tmp_path, per_round=None)
