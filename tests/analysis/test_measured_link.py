"""Projection from a measured bus-bandwidth curve, on a small synthetic curve with a
hand-computed answer."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from linkbench.analysis.measured_link import MeasuredLink, Message, messages_of

# busbw 10 GB/s at 1 MB and 100 GB/s at 100 MB, measured on 2 ranks.
ALLREDUCE_JOB = {
    "task": "allreduce",
    "world_size": 2,
    "collectives": [
        {"op": "all_reduce", "bytes": 1_000_000, "busbw_gb_s": 10.0},
        {"op": "all_reduce", "bytes": 100_000_000, "busbw_gb_s": 100.0},
    ],
}


def test_bus_bandwidth_is_interpolated_on_log_axes_and_clamped():
    curve = MeasuredLink.from_result(ALLREDUCE_JOB, "job")
    assert curve.busbw_gb_s("all_reduce", 10_000_000) == pytest.approx(math.sqrt(10 * 100))
    assert curve.busbw_gb_s("all_reduce", 1_000) == 10.0  # below the smallest size
    assert curve.busbw_gb_s("all_reduce", 10**10) == 100.0  # above the largest


def test_comm_time_by_hand():
    curve = MeasuredLink.from_result(ALLREDUCE_JOB, "job")
    # 4 buckets of 10 MB on 8 GPUs: 4 x 2*7/8 x 1e7 B / (sqrt(1000) GB/s) = 2.2136 ms
    ms = curve.comm_ms(8, [Message("all_reduce", 1e7, 4)])
    assert ms == pytest.approx(4 * 1.75 * 1e7 / (math.sqrt(1000) * 1e9) * 1e3)
    assert ms == pytest.approx(2.2136, abs=1e-4)
    assert curve.comm_ms(1, [Message("all_reduce", 1e7, 4)]) == 0.0


def test_a_job_without_bus_bandwidth_is_refused():
    with pytest.raises(ValueError, match="task=allreduce job of two or more ranks"):
        MeasuredLink.from_result({"task": "allreduce", "collectives": [{"busbw_gb_s": 0}]}, "j")


def test_project_command_uses_the_measured_curve_and_says_so(tmp_path):
    train, links = tmp_path / "train", tmp_path / "links"
    for path, result in (
        (links, ALLREDUCE_JOB),
        (train, {"task": "train", "model": "m", "world_size": 1, "metrics": {
            "compute_step_ms": 50.0, "grad_bytes": 4e7, "comm_bytes_per_step": 4e7,
            "comm_messages": [{"op": "all_reduce", "bytes": 1e7, "count": 4}]}}),
    ):  # fmt: skip
        path.mkdir()
        (path / "result.json").write_text(json.dumps(result))
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.project", str(train), "--gpus", "8", "--links",
         str(links), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)["measured"]
    assert measured["source"] == str(links)
    # No overlap measured: the step is compute + communication.
    assert measured["projection"][0]["step_ms"] == pytest.approx(50.0 + 2.2136, abs=1e-3)
    assert messages_of({"grad_bytes": 8.0}) == [Message("all_reduce", 8.0, 1.0)]
