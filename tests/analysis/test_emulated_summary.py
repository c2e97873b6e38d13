"""The summary of a sweep over emulated links, on jobs whose truth was chosen: the step time
set beside what the bytes predict, the link named beside each verdict, the plot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linkbench.analysis.emulated import link_rows, predicted_at_rate, with_bytes_of
from linkbench.analysis.report import write_summary
from linkbench.analysis.sweep import group, load_sweep, swept_keys
from linkbench.config.overrides import settings
from linkbench.files import SUMMARY_MD
from linkbench.link.emulated import payload_gb_s

from .fakes import fake_job

BYTES = 46_758_048  # resnet18's gradients
COMPUTE_MS, OVERLAP_MS = 110.0, 30.0


def _job(sweep: Path, rate: float, round_: int, hook: str, slower: float = 1.0) -> None:
    """One round's job whose step is exactly compute + bytes / payload - overlap (x slower)."""
    busbw = payload_gb_s(rate)
    sent = BYTES / (2 if hook == "fp16" else 1)
    jitter = 1 + 0.002 * (round_ - 1)
    step = (COMPUTE_MS + sent / busbw / 1e6 - OVERLAP_MS) * slower * jitter
    overrides = [f"interconnect.rate_gbit_s={rate:g}", f"comm_hook={hook}", f"round={round_}"]
    job = sweep / ",".join(overrides)
    job.mkdir(parents=True)
    metrics = {
        "samples_per_sec": 16e3 / step,
        "step_time_ms": step,
        "compute_step_ms": COMPUTE_MS,
        "ddp_comm_overlap_ms": OVERLAP_MS,
        "comm_bytes_per_step": sent,
        "link_busbw_gb_s": busbw,
    }
    result = {
        "status": "completed",
        "task": "train",
        "backend": "gloo",
        "world_size": 2,
        "round": round_,
        "overrides": overrides,
        "settings": settings(overrides),
        "metrics": metrics,
        "link": {"rate_gbit_s": rate, "delay_ms": 0.0},
        "transport": {"transport": "emulated link (gloo)", "verified": True},
    }
    (job / "result.json").write_text(json.dumps(result))


def _sweep(tmp_path: Path, slower_at_half: float = 1.0) -> Path:
    for round_ in range(3):
        for hook in ("none", "fp16"):
            _job(tmp_path, 0.5, round_, hook, slower_at_half)
            _job(tmp_path, 1.0, round_, hook)
    return tmp_path


def test_each_configuration_is_set_beside_what_its_bytes_predict(tmp_path):
    results = load_sweep(_sweep(tmp_path))
    rows = link_rows(group(results, swept_keys(results)))
    assert len(rows) == 4
    for row in rows:
        assert row.source == "no_sync probe and DDP"
        assert abs(row.error) < 0.01, row  # the truth, within the rounds' 0.2 % jitter
        # The plot's curve passes through the configuration's own rate.
        assert predicted_at_rate(row, row.rate_gbit_s) == pytest.approx(row.predicted_ms())


def test_compression_s_gain_is_predicted_from_the_uncompressed_run_alone(tmp_path):
    """Steps that are exactly compute + bytes / payload - overlap: the uncompressed run with
    fp16's half bytes at its own measured bandwidth is fp16's step (within the rounds'
    jitter)."""
    results = load_sweep(_sweep(tmp_path))
    rows = {(r.series, r.rate_gbit_s): r for r in link_rows(group(results, swept_keys(results)))}
    for rate in (0.5, 1.0):
        none, fp16 = rows[("comm_hook=none", rate)], rows[("comm_hook=fp16", rate)]
        assert fp16.link_bytes() == pytest.approx(none.link_bytes() / 2)
        assert with_bytes_of(none, fp16) == pytest.approx(fp16.step_ms.mean, rel=0.003)
        assert with_bytes_of(none, none) == pytest.approx(none.step_ms.mean)


def test_a_step_slower_than_its_bytes_shows_by_how_much(tmp_path):
    results = load_sweep(_sweep(tmp_path, slower_at_half=1.3))
    rows = link_rows(group(results, swept_keys(results)))
    errors = {r.rate_gbit_s: r.error for r in rows}
    assert errors[0.5] == pytest.approx(0.30, abs=0.01) and abs(errors[1.0]) < 0.01


def test_calls_inside_the_nodes_add_their_bytes_at_the_node_path_s_measured_pace(tmp_path):
    """An HSDP-like job on 2 nodes x 2 ranks: B through each uplink at the link's pace and
    2 B inside each node at the node probe's: the prediction holds both, and a step that
    took exactly that reads 0 % off; without the node probe it would read far off."""
    link_bw, node_bw, b = payload_gb_s(0.5), 0.7, 40e6
    comm = b / link_bw / 1e6 + 2 * b / node_bw / 1e6
    overrides = ["strategy=hsdp", "round=0"]
    for round_ in range(2):
        job = tmp_path / f"round={round_},strategy=hsdp"
        job.mkdir()
        metrics = {
            "samples_per_sec": 16e3 / (COMPUTE_MS + comm),
            "step_time_ms": COMPUTE_MS + comm,
            "compute_step_ms": COMPUTE_MS,
            "ddp_comm_overlap_ms": 0.0,
            "comm_bytes_per_step": b,
            "link_busbw_gb_s": link_bw,
            "node_busbw_gb_s": node_bw,
            "uplink_bytes_per_step_predicted": b,
            "node_bytes_per_step_predicted": 2 * b,
        }
        (job / "result.json").write_text(json.dumps({
            "status": "completed", "task": "train", "backend": "gloo", "world_size": 4,
            "round": round_, "overrides": overrides, "settings": settings(overrides),
            "metrics": metrics, "strategy": "hsdp",
            "link": {"rate_gbit_s": 0.5, "delay_ms": 0.0, "nodes": 2},
            "transport": {"transport": "emulated link (gloo)", "verified": True},
        }))  # fmt: skip
    results = load_sweep(tmp_path)
    [row] = link_rows(group(results, swept_keys(results)))
    assert row.node_ms() == pytest.approx(2 * b / node_bw / 1e6)
    assert abs(row.error) < 1e-9
    assert row.step_ms.mean / (row.predicted_ms() - row.node_ms()) - 1 > 0.1


def test_the_summary_names_the_link_beside_each_verdict_and_draws_the_rate(tmp_path):
    sweep = _sweep(tmp_path)
    text = write_summary(sweep, axis="comm_hook", baseline="none")
    assert text is not None
    verdicts = [line for line in text.splitlines() if line.startswith("- at ")]
    assert len(verdicts) == 2
    assert all("interconnect.rate_gbit_s=" in line and "**faster**" in line for line in verdicts)
    assert "## Emulated links: measured against the bytes" in text
    assert (sweep / "link_rate.png").stat().st_size > 10_000
    # Along the rate the slow link reads slower; a sweep not over the rate names it per line.
    along_rate = write_summary(sweep, axis="interconnect.rate_gbit_s", baseline=1, plots=False)
    assert along_rate is not None and along_rate.count("**slower**") == 2


def test_a_sweep_on_one_link_names_its_rate_in_every_verdict(tmp_path):
    for round_ in range(3):
        for hook in ("none", "fp16"):
            _job(tmp_path, 0.5, round_, hook)
    text = write_summary(tmp_path, axis="comm_hook", baseline="none", plots=False)
    assert text is not None
    lines = [line for line in text.splitlines() if "comm_hook=fp16 vs none" in line]
    assert lines and all("on an emulated link of 0.5 Gbit/s" in line for line in lines)


def test_report_refuses_an_axis_or_baseline_the_sweep_did_not_vary(tmp_path, capsys):
    from linkbench.analysis.report import main

    sweep = _sweep(tmp_path)
    assert main(["--axis", "nonexistent_key", str(sweep)]) == 2
    assert "--axis nonexistent_key is not a key this sweep varies; choose one of" in (
        capsys.readouterr().err
    )
    assert main(["--axis", "comm_hook", "--baseline", "bf16", str(sweep)]) == 2
    assert "choose one of fp16, none." in capsys.readouterr().err
    assert main(["--baseline", "none", str(sweep)]) == 2  # two keys vary: no default axis
    assert "--baseline none needs an axis: this sweep varies " in capsys.readouterr().err
    assert main(["--axis", "interconnect.rate_gbit_s", "--baseline", "1.0", str(sweep)]) == 0


def test_the_summary_names_the_uplink_its_runs_found_slow(tmp_path):
    """Three runs on 4 nodes, two of which found node 2 slow (0.030 and 0.031 GB/s against
    0.12): the summary names node 2, in 2 of 3 runs, at their median; a configuration whose
    runs named none, or that made no pair sends (one node), adds no line."""
    for round_, slow in enumerate([[0.030], [0.031], []]):
        named = [{"node": 2, "gb_s": g, "others_gb_s": 0.12, "share": g / 0.12} for g in slow]
        link = {"rate_gbit_s": 1.0, "nodes": 4, "slow_uplinks": named}
        fake_job(tmp_path, ["batch=8"], [100.0], round_=round_, fields={"link": link})
        healthy = {**link, "slow_uplinks": []}
        fake_job(tmp_path, ["batch=16"], [100.0], round_=round_, fields={"link": healthy})
        fake_job(tmp_path, ["batch=32"], [100.0], round_=round_, fields={"link": {"nodes": 1}})
    write_summary(tmp_path)
    text = (tmp_path / SUMMARY_MD).read_text()
    assert "## Emulated links: slow uplinks, found by measurement" in text
    said = "node 2's uplink read slow in 2 of 3 run(s), at 0.0305 GB/s against the other "
    assert said + "uplinks' 0.12 GB/s" in text, text
    assert text.count("uplink read slow") == 1


def test_an_uplink_set_apart_is_named_beside_the_rate(tmp_path):
    """4 nodes at 1 Gbit/s, node 2 at 0.25: the table's rate and each verdict's link name
    node 2's own rate (the ring runs at it); a uniform link reads as its rate alone."""
    uplinks = {"0": 1.0, "1": 1.0, "2": 0.25, "3": 1.0}
    link = {"rate_gbit_s": 1.0, "nodes": 4, "uplink_rates_gbit_s": uplinks}
    extra = {"link_busbw_gb_s": 0.029, "comm_bytes_per_step": BYTES,
             "compute_step_ms": COMPUTE_MS, "ddp_comm_overlap_ms": OVERLAP_MS}  # fmt: skip
    for round_ in range(3):
        for batch, runs in (("8", [100.0, 101.0, 99.0]), ("16", [150.0, 151.0, 149.0])):
            fake_job(tmp_path, [f"batch={batch}"], runs, round_=round_, extra=extra,
                     fields={"link": link})  # fmt: skip
    write_summary(tmp_path)
    text = (tmp_path / SUMMARY_MD).read_text()
    assert "on an emulated link of 1 Gbit/s (node 2 at 0.25): batch=16 vs 8" in text, text
    assert "| 1 (node 2 at 0.25) |" in text
