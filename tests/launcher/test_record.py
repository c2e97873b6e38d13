"""A job's record: result.json's fields are composed from what the job left by a function
that reads and writes nothing, then written."""

from __future__ import annotations

from linkbench.config.machine import Machine
from linkbench.launcher.record import JobOutputs, compose, median_metrics
from linkbench.metrics import exposed_note, probe_mark

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


def _probe(exposed, low, high, synced=10.0):
    run = {"comm_exposed_ms": exposed, "comm_exposed_ms_low": low, "comm_exposed_ms_high": high}
    run.update(comm_exposed_windows=5, synced_step_ms=synced, comm_fraction=exposed / synced)
    if note := exposed_note(run):
        run["comm_exposed_note"] = note
    return run


def test_the_median_exposed_communication_carries_the_note_of_its_own_figures():
    # The first run's figure stands, the second's lies below 0: their median (the mean of
    # two) holds 0, so the job's figure is marked as below the probe's noise; the other way
    # round the job's figure stands and no run's note is carried over.
    stands, negative = _probe(3.0, 1.0, 5.0), _probe(-5.0, -8.0, -2.0)
    assert "comm_exposed_note" not in stands and "bias" in negative["comm_exposed_note"]
    merged = median_metrics([stands, negative])
    assert merged["comm_exposed_ms"] == -1.0
    assert probe_mark(merged) == "below this probe's noise"
    assert "-1.000 ms [-3.500, +1.500]" in merged["comm_exposed_note"]
    clear = median_metrics([_probe(4.0, 2.0, 6.0), _probe(3.0, 1.0, 5.0), _probe(-1.0, -3.0, 1.0)])
    assert clear["comm_exposed_ms"] == 3.0 and probe_mark(clear) is None
    assert "comm_exposed_note" not in clear
    # The fraction is the median time's: here the median of the runs' fractions,
    # (0.03 - 0.2) / 2, would be negative beside a positive median time.
    slow, fast = _probe(3.0, 2.0, 4.0, synced=100.0), _probe(-2.0, -2.5, -1.5, synced=10.0)
    merged = median_metrics([slow, fast])
    assert merged["comm_fraction"] == 0.5 / 55.0 and "comm_exposed_note" in merged
    # Without a probe there is nothing to note.
    assert "comm_exposed_note" not in median_metrics([{"step_time_ms": 1.0}, {"step_time_ms": 2.0}])
