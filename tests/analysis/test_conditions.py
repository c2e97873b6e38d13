"""Runs unlike their round mates: the summary names a job whose host was busier, whose GPU
clocked down or ran hotter, or whose clocks NVML held down, and no other."""

from __future__ import annotations

from linkbench.analysis.conditions import drifted
from linkbench.analysis.report import write_summary
from linkbench.files import RESULT_FILE, write_json


def _job(name: str, load: float = 0.5, clock: float = 1980.0, temperature: float = 45.0,
         reasons: tuple[str, ...] = (), round_: int = 0) -> dict:  # fmt: skip
    gpu = {"index": 0, "sm_clock_mhz": 345, "temperature_c": 40, "clock_reasons": list(reasons)}
    point = {"cpus": 8, "load_1m": load, "gpus": [gpu]}
    return {
        "job": name,
        "status": "completed",
        "task": "train",
        "round": round_,
        "settings": {"interconnect": name, "round": round_},
        "metrics": {"samples_per_sec": 1000.0, "step_time_ms": 10.0},
        "conditions": [{"start": point, "end": point}],
        "hw": {"available": True, "sm_clock_mhz_mean": clock, "temperature_c_mean": temperature},
    }


def test_alike_jobs_are_not_named():
    jobs = [_job(f"j{i}", load=0.5 + 0.1 * i, clock=1980 - 10 * i) for i in range(4)]
    assert drifted(jobs) == []


def test_the_job_that_differs_is_named_with_what_differed():
    jobs = [
        _job("quiet_a"), _job("quiet_b"), _job("quiet_c"),
        _job("busy", load=4.0),
        _job("slow_clock", clock=1700.0),
        _job("hot", temperature=70.0),
        _job("capped", reasons=("sw_power_cap", "applications_clocks")),
    ]  # fmt: skip
    lines = drifted(jobs)
    named = {line.split(":")[0].lstrip("- ") for line in lines}
    assert named == {"busy", "slow_clock", "hot", "capped"}, lines
    text = "\n".join(lines)
    assert "host load 4.0 (1-minute average) against 0.5" in text
    assert "SM clock 1,700 MHz over its timed steps against 1,980" in text
    assert "GPU at 70 °C against 45 °C" in text
    assert "GPU 0 sw_power_cap at its start" in text and "applications_clocks" not in text


def test_mates_are_the_jobs_of_the_same_round():
    """A later round on a warmer machine is its own reference, not an outlier of round 0."""
    jobs = [_job(f"r0_{i}", temperature=40.0) for i in range(3)]
    jobs += [_job(f"r1_{i}", temperature=60.0, round_=1) for i in range(3)]
    assert drifted(jobs) == []


def test_the_summary_has_a_section_for_them(tmp_path):
    for job in [_job("a"), _job("b"), _job("c", load=5.0)]:
        directory = tmp_path / f"interconnect={job['job']},round=0"
        directory.mkdir()
        write_json(directory / RESULT_FILE, job)
    summary = write_summary(tmp_path, plots=False)
    assert summary is not None and "## Runs unlike their round mates" in summary
    assert "- interconnect=c,round=0: host load 5.0" in summary
