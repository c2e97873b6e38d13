"""What the summary may say, and nothing more: an adaptive sweep's rounds.json cut short is
said, not read as absent (read as absent, the report would judge the sweep as fixed rounds,
intervals that ignore its looks, without a word, and a resumed sweep would forget the rounds
it had run); two runs give no interval anywhere; a verdict that rests on cores the host
shares says so."""

from __future__ import annotations

import json

import pytest

from linkbench.analysis.report import main as report_main
from linkbench.errors import ConfigError
from linkbench.files import ROUNDS_FILE, SUMMARY_MD

from .fakes import BESIDE_A_HOG, OWN_ONLY, fake_job, run_conditions


def _sweep(tmp_path, rounds_text: str):
    for round_ in range(3):
        for arm, value in (("nvlink", 1400), ("pcie", 1000)):
            fake_job(tmp_path, [f"interconnect={arm}"], [value + round_], round_=round_)
    (tmp_path / ROUNDS_FILE).write_text(rounds_text)


@pytest.mark.parametrize(
    ("text", "why"),
    [('{"rule": "adaptive", "max_rounds": 8, "rou', "cut short or not JSON"),
     ("[1, 2]", "not a JSON object")],
)  # fmt: skip
def test_the_report_refuses_a_damaged_rounds_json_in_one_sentence(tmp_path, capsys, text, why):
    _sweep(tmp_path, text)
    assert report_main([str(tmp_path)]) == 2
    said = capsys.readouterr().err.strip()
    assert len(said.splitlines()) == 1 and why in said and str(tmp_path / ROUNDS_FILE) in said
    assert not (tmp_path / SUMMARY_MD).exists(), "no summary that reads the sweep otherwise"


def test_a_whole_rounds_json_is_read_and_none_is_fixed_rounds(tmp_path):
    record = {"rule": "adaptive", "max_rounds": 8, "min_rounds": 2, "rounds": []}
    _sweep(tmp_path, json.dumps(record))
    assert report_main([str(tmp_path)]) == 0
    assert "adaptive" in (tmp_path / SUMMARY_MD).read_text()
    (tmp_path / ROUNDS_FILE).unlink()
    assert report_main([str(tmp_path)]) == 0


def test_a_resumed_sweep_refuses_a_damaged_rounds_json(tmp_path):
    from linkbench.analysis.sequential import Design
    from linkbench.launcher.sweeper import AdaptiveRounds

    (tmp_path / ROUNDS_FILE).write_text('{"rule": "adaptive", "rounds": [{"jobs": 2')
    with pytest.raises(ConfigError, match=r"resume=true: .*rounds\.json is cut short"):
        AdaptiveRounds([["batch=8"], ["batch=16"]], tmp_path, Design(8), resume=True)
    AdaptiveRounds([["batch=8"], ["batch=16"]], tmp_path, Design(8), resume=False)  # a new one


def test_two_runs_show_no_interval_anywhere_a_mean_is_shown(tmp_path):
    """Before: the summary's configurations said "too few for an interval" but summary.csv
    and the other tables printed two runs' t-interval ([0.276, 1,003,132] samples/s)."""
    import csv

    from linkbench.analysis.stats import mean_interval

    for round_ in range(2):
        for arm, value in (("nvlink", 1400), ("pcie", 1000)):
            fake_job(tmp_path, [f"interconnect={arm}"], [value + 300 * round_], round_=round_)
    assert report_main([str(tmp_path)]) == 0
    rows = list(csv.DictReader((tmp_path / "summary.csv").open()))
    assert rows and all(r["samples_per_sec"] for r in rows)
    assert all(not r["samples_per_sec_low"] and not r["samples_per_sec_high"] for r in rows)
    assert "too few for an interval" in (tmp_path / SUMMARY_MD).read_text()
    assert not mean_interval([1.0, 2.0]).has_interval
    assert mean_interval([1.0, 2.0, 1.5]).has_interval


@pytest.mark.parametrize(
    ("inside_bytes", "device", "said"),
    [((93.5e6, 0.0), "cpu", True), ((93.5e6, 93.5e6), "cpu", False),
     ((93.5e6, 0.0), "cuda", False)],
)  # fmt: skip
def test_a_verdict_resting_on_cores_the_host_shares_says_so(tmp_path, inside_bytes, device, said):
    """HSDP against DDP on an emulated cluster of CPU ranks: HSDP's gathers run inside a
    node on the cores that compute, so its order followed the host's load (faster on a quiet
    host, slower at load 2-4); the verdict line says so where the sides' bytes inside a node
    differ, and only there."""
    link = {"rate_gbit_s": 0.5, "nodes": 2, "ranks_per_node": 2}
    for round_ in range(3):
        for (strategy, value), inside in zip((("hsdp", 1050), ("ddp", 1000)), inside_bytes,
                                             strict=True):  # fmt: skip
            fake_job(tmp_path, [f"strategy={strategy}"], [value + 5 * round_], round_=round_,
                     extra={"node_bytes_per_step_predicted": inside},
                     fields={"link": link, "device_type": device})  # fmt: skip
    assert report_main([str(tmp_path), "--axis", "strategy", "--baseline", "ddp"]) == 0
    text = (tmp_path / "reanalysis-strategy" / SUMMARY_MD).read_text()
    line = next(x for x in text.splitlines() if "strategy=hsdp vs ddp" in x)
    assert "**faster**" in line
    assert ("shares the cores with computing" in line) == said, line


@pytest.mark.parametrize(
    ("busbw", "run", "said"),
    [((0.06, 0.06, 0.061), run_conditions(1.0), None),
     ((0.105, 0.671, 0.3), run_conditions(1.0),
      "the link probe read 0.105-0.671 GB/s across runs"),
     ((0.06, 0.06, 0.061), run_conditions(14.0), "the host's load reached 14 on 2 usable cores"),
     ((0.06, 0.06, 0.061), run_conditions(4.5, OWN_ONLY), None),  # its own ranks' load
     ((0.06, 0.06, 0.061), run_conditions(4.5, BESIDE_A_HOG),
      "other programs kept 0.90 of its 2 usable cores busy")],
)  # fmt: skip
def test_a_prediction_whose_inputs_moved_says_so(tmp_path, busbw, run, said):
    """On a busy host (load 5-14 on 2 cores) 6 of 19 runs read outside 15 % of their
    prediction while the link probe read 0.105-0.671 GB/s across runs of one topology, and
    the table stated the error with no caveat. A prediction whose probes' readings moved, or
    whose runs had other programs beside them, says so beside its figure; a quiet one says
    nothing more. A load above the cores from the run's own ranks (4 on 2 cores) is no other
    work: the load average counts them, the CPU seconds a run records tell them apart (the
    load is read only where a run has no CPU seconds)."""
    link = {"rate_gbit_s": 0.5, "nodes": 2, "ranks_per_node": 1}
    conditions = [run]
    for round_, reading in enumerate(busbw):
        for arm in ("ddp", "fsdp"):
            extra = {"link_busbw_gb_s": reading, "comm_bytes_per_step": 46.8e6,
                     "compute_step_ms": 120.0, "ddp_comm_overlap_ms": 20.0}  # fmt: skip
            fake_job(tmp_path, [f"strategy={arm}"], [1000.0 + round_], round_=round_,
                     extra=extra, fields={"link": link, "conditions": conditions})  # fmt: skip
    assert report_main([str(tmp_path)]) == 0
    text = (tmp_path / SUMMARY_MD).read_text()
    assert "## Emulated links: measured against the bytes" in text
    if said is None:
        assert "inputs moved" not in text and "not held to the 15 %" not in text
    else:
        note = next(x for x in text.splitlines() if "rests on inputs that moved" in x)
        assert said in note and "not held to the 15 % a quiet host gives" in note
        assert "(inputs moved) |" in text
