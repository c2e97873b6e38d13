"""A job's record: result.json's fields are composed from what the job left by a function
that reads and writes nothing, then written."""

from __future__ import annotations

from linkbench.config.machine import Machine
from linkbench.launcher.record import JobOutputs, compose

from ..conftest import job_plan


def _transport(verified):
    return {"transport": "gloo", "verified": verified, "reason": "r", "summary": None}


def test_compose_turns_a_jobs_outputs_into_its_fields_and_touches_no_file(compose_config, tmp_path):
    plan = job_plan(compose_config(), str(tmp_path), [], Machine(0))
    outputs = JobOutputs(
        fields={"status": "completed", "overrides": []},
        runs=[{"samples_per_sec": 100.0, "step_time_ms": 10.0, "note": "first"},
              {"samples_per_sec": 300.0, "step_time_ms": 30.0, "note": "second"},
              {"samples_per_sec": 200.0, "step_time_ms": 20.0, "note": "third"}],
        transports=[_transport(True), _transport(None), _transport(True)],
        hardware={"warnings": ["a GPU throttled"]},
        trace={"mean": {"step_ms": 25.0}, "ranks": []},
    )  # fmt: skip
    fields = compose(outputs, plan)
    assert fields["metrics"] == {"samples_per_sec": 200.0, "step_time_ms": 20.0, "note": "first"}
    assert [r["samples_per_sec"] for r in fields["repeat_metrics"]] == [100.0, 300.0, 200.0]
    assert fields["warnings"] == ["a GPU throttled"]
    # One verdict for the repeats: an unverified one outweighs the verified ones.
    assert fields["transport"]["verified"] is None
    assert fields["transport"]["repeats_checked"] == 3
    assert fields["nccl_tuning"]["available"] is False
    assert fields["trace"]["mean"]["untraced_step_ms"] == 20.0
    assert fields["trace"]["mean"]["stretch"] == 1.25
    assert outputs.fields == {"status": "completed", "overrides": []}, "its inputs are kept"
    assert outputs.trace == {"mean": {"step_ms": 25.0}, "ranks": []}
    assert list(tmp_path.iterdir()) == [], "compose writes nothing"


def test_a_job_that_never_planned_records_what_it_collected(tmp_path):
    fields = compose(JobOutputs(fields={"status": "failed", "error": "bad"}, runs=[]), None)
    assert fields == {"status": "failed", "error": "bad", "metrics": {}}
