"""Adaptive rounds (repeats=auto) as the sweeper runs them, on jobs whose results are written
with known effects: which jobs each round runs, when and why the sweep stops, what
rounds.json and the summary say."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from linkbench.analysis.report import write_summary
from linkbench.analysis.sequential import Design
from linkbench.config.overrides import settings
from linkbench.errors import ConfigError
from linkbench.files import RESULT_FILE, ROUNDS_FILE, write_json
from linkbench.launcher.sweeper import AdaptiveRounds, check_adaptive, sweep_repeats

# batch 256: nvlink 10 % faster than pcie on a quiet machine; batch 32: no difference, noisy.
JOBS = [[f"interconnect={i}", f"batch={b}"] for b in (32, 256) for i in ("nvlink", "pcie")]


def _throughput(job: list[str], rng: random.Random) -> float:
    s = settings(job)
    if s["batch"] == 256:
        return 1000.0 * (1.10 if s["interconnect"] == "nvlink" else 1.0) * rng.gauss(1, 0.005)
    return 500.0 * rng.gauss(1, 0.10)


def _run(job: list[str], sweep_dir: Path, rng: random.Random) -> None:
    """What a job leaves: its result.json, as linkbench's record writes it."""
    directory = sweep_dir / ",".join(sorted(job))
    directory.mkdir(parents=True)
    value = _throughput(job, rng)
    write_json(
        directory / RESULT_FILE,
        {
            "status": "completed",
            "task": "train",
            "settings": settings(job),
            "round": settings(job)["round"],
            "metrics": {"samples_per_sec": value, "step_time_ms": 1e5 / value},
        },
    )


def _sweep(rounds: AdaptiveRounds, rng: random.Random) -> list[list[list[str]]]:
    """Run the sweep to its end the way the sweeper does: a round, then ask for the next."""
    ran = []
    while jobs := rounds.next_round():
        ran.append(jobs)
        for job in jobs:
            _run(job, rounds.sweep_dir, rng)
    return ran


def test_decided_comparisons_stop_running_and_the_sweep_ends_when_all_are(tmp_path):
    rounds = AdaptiveRounds(JOBS, tmp_path, Design(max_rounds=8, min_rounds=3))
    ran = _sweep(rounds, random.Random(1))
    assert [len(r) for r in ran[:3]] == [4, 4, 4]  # every configuration, min_rounds times
    assert [job[0] for job in ran[1]] == ["round=1"] * 4
    assert ran[1][0][1:] == JOBS[-1]  # odd rounds in reverse order
    # batch 256 is decided (faster) by round 3; later rounds run only batch 32's two jobs
    later = [job for r in ran[3:] for job in r]
    assert later and all("batch=32" in job for job in later)
    record = json.loads((tmp_path / ROUNDS_FILE).read_text())
    assert record["rule"] == "adaptive" and record["max_rounds"] == 8
    assert len(record["rounds"]) == len(ran)
    final = record["rounds"][-1]["verdicts"]
    assert final["interconnect=nvlink vs pcie at batch=256"] == "faster"
    assert record["stopped"].startswith(("every comparison decided", "max_rounds=8 reached"))
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None
    assert f"Adaptive rounds: {len(ran)} round(s) of at most 8" in summary
    assert "repeated 95 % confidence intervals of a group-sequential design" in summary
    assert "sequential): **faster**" in summary


def test_an_undecided_comparison_runs_to_max_rounds_and_says_so(tmp_path):
    jobs = [job for job in JOBS if "batch=32" in job]
    rounds = AdaptiveRounds(jobs, tmp_path, Design(max_rounds=4, min_rounds=2))
    ran = _sweep(rounds, random.Random(2))
    assert len(ran) == 4
    assert rounds.stopped == "max_rounds=4 reached, 1 comparison(s) undecided"
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None and "raise hydra.sweeper.max_rounds" in summary


def test_a_comparison_beyond_deciding_stops_early_and_the_summary_says_what_it_would_need(
    tmp_path,
):
    jobs = [job for job in JOBS if "batch=32" in job]  # A/A at CV 10 %: ±2 % is out of reach
    rounds = AdaptiveRounds(jobs, tmp_path, Design(max_rounds=8, min_rounds=3))
    ran = _sweep(rounds, random.Random(5))
    assert len(ran) < 8
    assert rounds.stopped == "every comparison decided or beyond deciding (1)"
    record = json.loads((tmp_path / ROUNDS_FILE).read_text())
    assert record["rounds"][len(ran) - 1]["futile"]["interconnect=nvlink vs pcie"] < 0.05
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None and "as beyond deciding" in summary
    assert "an equal verdict would need a margin of" in summary
    name = "interconnect=nvlink vs pcie"
    acted = record["rounds"][len(ran) - 1]
    assert f"stopped after {acted['futile_pairs'][name]} rounds" in summary
    assert f"would decide it at {acted['futile'][name]:.1%}, below its 5% line" in summary
    assert "0.5-23 % were decided later in simulation" in summary  # no point chance pretended
    # The line prints what the rule acted on, at the round it acted, not a chance recomputed
    # at the final level (before: a Holm sweep relaxed later printed "a chance of 77.1 %").
    acted |= {"futile": {name: 0.0321}, "futile_pairs": {name: 4},
              "futile_margin_needed": {name: 0.07}}  # fmt: skip
    (tmp_path / ROUNDS_FILE).write_text(json.dumps(record))
    again = write_summary(tmp_path, plots=False)
    assert again is not None
    assert "stopped after 4 rounds as beyond deciding" in again and "decide it at 3.2%" in again
    assert "would need a margin of ±7%" in again


def test_a_sweep_with_nothing_to_compare_runs_min_rounds(tmp_path):
    jobs = [["interconnect=pcie", f"batch={b}", f"scaling={s}"] for b in (32, 256) for s in "ab"]
    rounds = AdaptiveRounds(jobs, tmp_path, Design(max_rounds=8, min_rounds=3))
    assert len(_sweep(rounds, random.Random(3))) == 3
    assert rounds.stopped == "min_rounds=3 done, nothing to compare"


def test_no_round_starts_that_would_overrun_the_budget(tmp_path, monkeypatch):
    clock = iter(range(0, 10_000, 10))  # every look at the clock: 10 s later
    monkeypatch.setattr("linkbench.launcher.sweeper.time.monotonic", lambda: next(clock))
    jobs = [job for job in JOBS if "batch=32" in job]
    rounds = AdaptiveRounds(jobs, tmp_path, Design(max_rounds=8, min_rounds=2), budget_s=45)
    ran = _sweep(rounds, random.Random(4))
    assert len(ran) < 8
    assert rounds.stopped is not None and rounds.stopped.startswith("budget_s=45 would run out")


def test_a_comparison_the_budget_stopped_says_so_not_beyond_deciding(tmp_path, monkeypatch):
    """min_rounds=6 and a budget that ends the sweep after round 4: the sweeper never looked
    for futility, though at that spread the comparison's chance to decide is below 5 %."""
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr("linkbench.launcher.sweeper.time.monotonic", lambda: next(clock))
    jobs = [job for job in JOBS if "batch=32" in job]
    rounds = AdaptiveRounds(jobs, tmp_path, Design(max_rounds=8, min_rounds=6), budget_s=110)
    assert len(_sweep(rounds, random.Random(0))) == 4
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None and "beyond deciding" not in summary.split("Method:")[0]
    assert "undecided when the sweep stopped: budget_s=110 would run out in round 5" in summary
    assert "[no bounds before round 6, the design's first look]" in summary and "inf" not in summary


def test_a_resumed_sweep_keeps_the_rounds_it_had_run(tmp_path):
    """Resumed, the rounds run again from the first (their completed jobs skipped); with
    every round's results already there it decides at min_rounds, and rounds.json keeps the
    rounds the sweep had run."""
    ran = _sweep(
        AdaptiveRounds(JOBS, tmp_path, Design(max_rounds=8, min_rounds=3)), random.Random(1)
    )
    assert len(ran) > 3
    again = AdaptiveRounds(JOBS, tmp_path, Design(max_rounds=8, min_rounds=3), resume=True)
    while jobs := again.next_round():  # every job already completed: all skipped
        assert all((tmp_path / ",".join(sorted(job))).is_dir() for job in jobs)
    record = json.loads((tmp_path / ROUNDS_FILE).read_text())
    assert len(record["rounds"]) == len(ran)
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None and f"Adaptive rounds: {len(ran)} round(s)" in summary


def _config(repeats: object, task: list[str]) -> object:
    return OmegaConf.create(
        {"repeats": repeats, "hydra": {"sweeper": {"params": {}}, "overrides": {"task": task}}}
    )


def test_repeats_auto_is_the_multiruns_default_and_a_number_keeps_fixed_rounds():
    assert sweep_repeats(_config("auto", ["batch=8,16"])) == "auto"
    assert sweep_repeats(_config("auto", ["batch=8,16", "repeats=3"])) == 3
    assert sweep_repeats(_config(5, ["batch=8,16", "repeats=auto"])) == "auto"
    assert sweep_repeats(_config("auto", ["repeats=1,3"])) == 1  # swept: one round each


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ((1, 1, None, "obrien_fleming"), "hydra.sweeper.max_rounds=1"),
        ((8, 9, None, "obrien_fleming"), "hydra.sweeper.min_rounds=9"),
        ((8, 3, 0.0, "obrien_fleming"), "hydra.sweeper.budget_s=0.0"),
        ((8, 3, None, "bonferroni"), "hydra.sweeper.spending=bonferroni"),
    ],
)
def test_adaptive_options_that_cannot_run_are_refused_in_one_sentence(options, named):
    with pytest.raises(ConfigError) as refused:
        check_adaptive(*options)
    assert str(refused.value).startswith(named) and str(refused.value).count(". ") == 0
