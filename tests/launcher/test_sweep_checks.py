"""A sweep is checked whole before its first job: every configuration planned, every value
named once, the summary's axis and baseline among what it sweeps; a refusal is one sentence
naming the first bad configuration or key, within seconds, and no job starts."""

from __future__ import annotations

import time

import pytest

from ..conftest import run_cli


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["batch=range(1,60)", "steps=5", "untimed_steps=10"],
            "configuration 1 of 59 of this sweep (batch=1 steps=5 untimed_steps=10) is refused, "
            "so no job starts: untimed_steps=10 must be at least 0 and below steps=5",
        ),
        (["steps=20", "batch=32,32"], "names batch=32 more than once"),
        (
            ["batch=8,16", "hydra.callbacks.sweep_summary.axis=nonexistent_key"],
            "axis=nonexistent_key is not a key this sweep varies; choose one of batch.",
        ),
        (
            ["batch=8,16", "hydra.callbacks.sweep_summary.axis=batch",
             "hydra.callbacks.sweep_summary.baseline=999"],
            "baseline=999 is not a value of batch in this sweep; choose one of 8, 16.",
        ),
        (
            ["interconnect=nvlink,pcie", "hydra.callbacks.sweep_summary.baseline=socket"],
            "baseline=socket is not a value of interconnect",
        ),
        (
            ["batch=range(1,90)", "repeats=3"],
            "this sweep means 89 configurations and 267 jobs, more than "
            "hydra.sweeper.max_jobs=200; add hydra.sweeper.max_jobs=267",
        ),
    ],
    ids=["a-bad-configuration", "a-value-twice", "an-axis-not-swept", "a-baseline-not-swept",
         "a-baseline-of-the-default-axis", "a-large-sweep-unconfirmed"],
)  # fmt: skip
def test_a_sweep_is_refused_whole_before_any_job(tmp_path, args, words):
    started = time.monotonic()
    done = run_cli(["-m", *args, f"hydra.sweep.dir={tmp_path / 'sweep'}"], timeout=120)
    assert done.returncode != 0
    assert words in done.stderr, done.stderr[-2000:]
    assert time.monotonic() - started < 60
    assert not list(tmp_path.glob("sweep/*")), "no job directory, no multirun.yaml"


def test_an_experiments_sweep_run_without_dash_m_says_so(tmp_path):
    quick = ["steps=6", "untimed_steps=2", "log_every=2", "task.no_sync_steps=0"]
    done = run_cli(["+experiment=cpu_smoke", *quick, f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    said = "defines a sweep (hydra.sweeper.params: interconnect, batch) that runs only with -m"
    assert said in done.stdout + done.stderr
