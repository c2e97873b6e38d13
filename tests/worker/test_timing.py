"""Timing windows hold the steps and nothing else: the logging step's host work (loss read,
all-reduce, TensorBoard, metrics.json) is outside them."""

from __future__ import annotations

import pytest

from ..conftest import load_result, run_cli

JOB = ["steps=14", "untimed_steps=4", "log_every=1", "batch=4", "task.no_sync_steps=0"]
INJECTED_MS = 60.0


@pytest.mark.slow  # about 30 s on 2 cores; .ci/run runs it
def test_a_slow_logging_step_leaves_the_step_time_unchanged(tmp_path):
    times = {}
    for delay in (0.0, INJECTED_MS):
        job = tmp_path / f"delay{delay:g}"
        done = run_cli([*JOB, f"debug.log_delay_ms={delay}", f"hydra.run.dir={job}"])
        assert done.returncode == 0, done.stderr[-3000:]
        times[delay] = load_result(job)["metrics"]["step_time_ms_min"]
    # Logged every step, a 60 ms write inside the windows would add 60 ms to every window,
    # the quickest included; the quickest window is also the one least disturbed by another
    # test on the same 2 cores (make test runs two at a time).
    assert times[INJECTED_MS] < times[0.0] + INJECTED_MS / 4, times
