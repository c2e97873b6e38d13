"""The measurement chain against links whose answer is known (interconnect=emulated).

Each test is one of the answers a link of set rate must give: the bus bandwidth it carries,
the step time training loses on it (as a verdict, and by what its bytes predict), the
exposed communication the probe and the trace see, the projection fed its measured curve,
where gradient compression pays, and an A/A sweep that stays A/A. Minutes on 2 cores; the
figures they assert are recorded in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from linkbench.analysis.compare import sweep_comparisons
from linkbench.analysis.emulated import link_rows
from linkbench.analysis.measured_link import MeasuredLink, messages_of
from linkbench.analysis.projection import inputs_from_result, projected
from linkbench.analysis.sequential import sweep_design
from linkbench.analysis.sweep import load_sweep
from linkbench.link import netns
from linkbench.link.emulated import payload_gb_s

from ..conftest import run_cli

PROBLEM = netns.emulation_problem(delay=False)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM)),
]
RATE = "interconnect.rate_gbit_s"
RATES = (0.5, 1.0, 2.0)


def _sweep(tmp_path_factory, name: str, args: list[str]) -> Path:
    sweep = tmp_path_factory.mktemp(name) / "sweep"
    done = run_cli(["-m", *args, f"hydra.sweep.dir={sweep}"], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return sweep


def _by_rate(sweep: Path) -> dict[float, dict]:
    return {float(r["link"]["rate_gbit_s"]): r for r in load_sweep(sweep)}


@pytest.fixture(scope="module")
def curves(tmp_path_factory) -> dict[float, dict]:
    """task=allreduce over links of 0.5, 1 and 2 Gbit/s, 1 to 32 MiB: one job each."""
    args = [
        "interconnect=emulated",
        f"{RATE}={','.join(map(str, RATES))}",
        "task=allreduce",
        "task.ops=[all_reduce]",
        "task.min_bytes=1048576",
        "task.max_bytes=33554432",
        "task.warmup_iters=1",
        "task.iters=3",
        "repeats=1",
    ]
    return _by_rate(_sweep(tmp_path_factory, "curves", args))


@pytest.fixture(scope="module")
def training(tmp_path_factory) -> Path:
    """The committed experiment (resnet18 over 0.5 and 1 Gbit/s, traced), with and without
    fp16 gradient compression, compared along the hook, in 3 fixed rounds: a known answer's
    test reads each comparison's plain paired interval, not the repeated one of a design that
    looked along another axis (under CI's load one noisy round left a 2x slowdown
    inconclusive there)."""
    args = [
        "+experiment=emulated_link",
        "repeats=3",
        "strategy/comm_hook=none,fp16",
        "hydra.callbacks.sweep_summary.axis=strategy/comm_hook",
        "hydra.callbacks.sweep_summary.baseline=none",
    ]
    return _sweep(tmp_path_factory, "training", args)


def _along(sweep: Path, axis: str, baseline: object, family: str = "holm") -> dict[str, object]:
    found = sweep_comparisons(
        load_sweep(sweep), axis, baseline, design=sweep_design(sweep), family=family
    )
    return {c.where or "": c for c in found.comparisons}


def test_1_the_bus_bandwidth_is_the_rate_set(curves):
    for rate, result in curves.items():
        rows = sorted(result["collectives"], key=lambda row: row["bytes"])
        for row in rows[-2:]:  # 16 and 32 MiB
            assert row["busbw_gb_s"] == pytest.approx(rate / 8, rel=0.10), (rate, row)
        # Closer still to what the link carries as data, its headers taken off: the faster
        # of the two sizes, since a busy 2-core host only ever slows a size's 3 calls (one
        # CI run read 4.4 % low at 16 MiB, the next four runs within 3 % at both).
        best = max(rows[-2:], key=lambda row: row["busbw_gb_s"])
        assert best["busbw_gb_s"] == pytest.approx(payload_gb_s(rate), rel=0.03), (rate, best)
        assert result["transport"]["verified"] is True, result["transport"]["reason"]


def test_1_a_delay_adds_its_latency_to_small_messages(tmp_path_factory):
    """Where the kernel has netem: 2 ranks' ring all_reduce of a small message waits for a
    message each way per step (reduce-scatter, then all-gather), so a one-way delay of d
    adds about 2d to it; the bandwidth of large messages stays the rate's."""
    problem = netns.emulation_problem(delay=True)
    if problem is not None:
        pytest.skip(problem)
    args = [
        "interconnect=emulated",
        f"{RATE}=1",
        "interconnect.delay_ms=0,5",
        "task=allreduce",
        "task.ops=[all_reduce]",
        "task.min_bytes=1024",
        "task.max_bytes=16777216",
        "task.size_factor=16",
        "task.warmup_iters=2",
        "task.iters=5",
        "repeats=1",
    ]
    results = load_sweep(_sweep(tmp_path_factory, "delay", args))
    small = {
        float(r["link"]["delay_ms"]): min(r["collectives"], key=lambda row: row["bytes"])
        for r in results
    }
    added_ms = (small[5.0]["time_us"] - small[0.0]["time_us"]) / 1e3
    assert 1.5 * 5 <= added_ms <= 4 * 5, added_ms


def test_2_training_on_the_slow_link_is_slower_by_what_the_bytes_predict(training):
    # Each comparison's own 95 % (a family of these 2 at 97.5 % would do as well).
    verdicts = _along(training, RATE, 1, family="none")
    rows = {(r.series, r.rate_gbit_s): r for r in link_rows(_configs(training))}
    for where, comparison in verdicts.items():
        assert comparison.verdict == "slower", comparison
        slow, fast = rows[(where, 0.5)], rows[(where, 1.0)]
        grown = slow.step_ms.mean - fast.step_ms.mean
        predicted = slow.exposed_ms() - fast.exposed_ms()
        assert grown == pytest.approx(predicted, rel=0.15), (where, grown, predicted)
    assert len(verdicts) == 2  # strategy/comm_hook=none and fp16
    for row in rows.values():  # each step time against its own prediction, too
        assert abs(row.error) < 0.15, row


def _configs(sweep: Path):
    return sweep_comparisons(load_sweep(sweep), RATE, 1).configs


def test_3_probe_and_trace_agree_on_exposed_communication(training):
    """Without compression: a compression hook's own casts run only in synced steps, so the
    no_sync probe counts them as exposed communication and the trace as computing."""
    for config in _configs(training):
        if config.values_by_key.get("strategy/comm_hook") != "none":
            continue
        row = next(r for r in link_rows([config]))
        trace = config.trace_means()
        probe = config.mean("comm_exposed_ms")
        assert trace is not None and probe is not None
        assert probe.mean == pytest.approx(trace["exposed_comm_ms"], rel=0.20), config.label()
        predicted = row.exposed_ms()
        assert trace["exposed_comm_ms"] == pytest.approx(predicted, rel=0.20), config.label()
        assert probe.mean == pytest.approx(predicted, rel=0.20), config.label()


def test_4_the_projection_fed_the_measured_curve_predicts_each_link(curves, training):
    """Every uncompressed job, projected onto each link's measured all-reduce curve,
    predicts the step time measured on that link: across link speeds, not only at its own."""
    jobs = [r for r in load_sweep(training) if r["settings"].get("strategy/comm_hook") == "none"]
    measured = {}
    for result in jobs:
        measured.setdefault(float(result["link"]["rate_gbit_s"]), []).append(
            result["metrics"]["step_time_ms"]
        )
    for source in jobs:
        inputs = inputs_from_result(source)
        for rate, steps in measured.items():
            curve = MeasuredLink.from_result(curves[rate], f"{rate} Gbit/s")
            comm = curve.comm_ms(2, messages_of(source["metrics"]))
            step = projected(inputs, 2, comm)["step_ms"]
            mean = sum(steps) / len(steps)
            assert step == pytest.approx(mean, rel=0.15), (source["job_dir"], rate, step, mean)


def test_5_compression_pays_where_the_link_is_slow(training):
    verdicts = _along(training, "strategy/comm_hook", "none")
    slow = verdicts[f"{RATE}=0.5"]
    fast = verdicts[f"{RATE}=1"]
    assert slow.verdict == "faster", slow
    assert fast.verdict in ("faster", "equal", "inconclusive") and fast.ratio.estimate < (
        slow.ratio.estimate
    )
    # By what halving the bytes explains: the none arm's step less half its communication.
    rows = link_rows(_configs(training))
    row = next(r for r in rows if r.series == "strategy/comm_hook=none" and r.rate_gbit_s == 0.5)
    explained = row.step_ms.mean / (row.step_ms.mean - row.comm_ms() / 2)
    assert slow.ratio.estimate == pytest.approx(explained, rel=0.15)


def _a_a_winners(tmp_path_factory, name: str) -> list[str]:
    """One A/A sweep: two arms on the same link that differ only in nccl.algo, which gloo
    ignores. The verdicts along the axis that name a winner (none expected)."""
    args = [
        "+experiment=emulated_link",
        "profile=none",
        f"{RATE}=1",
        "nccl.algo=ring,tree",
        "hydra.sweeper.max_rounds=4",
        "hydra.callbacks.sweep_summary.axis=nccl.algo",
        "hydra.callbacks.sweep_summary.baseline=ring",
        "steps=12",
    ]
    sweep = _sweep(tmp_path_factory, name, args)
    verdicts = _along(sweep, "nccl.algo", "ring")
    assert verdicts and json.loads((sweep / "rounds.json").read_text())["rounds"]
    summary = (sweep / "summary.md").read_text()
    winners = [
        f"{arm}: {c.verdict} {c.ratio}"
        for arm, c in verdicts.items()
        if c.verdict not in ("equal", "inconclusive")
    ]
    if "**faster**" in summary or "**slower**" in summary:
        winners.append("summary.md names a winner")
    return winners


def test_6_an_a_a_sweep_on_one_emulated_link_stays_a_a(tmp_path_factory):
    """The design lets an A/A sweep name a winner in at most 5 % of sweeps (proven by
    simulation in tests/analysis/test_sequential.py), so one false verdict is the design's
    error, not the link's: a second, independent sweep is run, and the test fails when it
    names a winner too (at most 0.25 % of the time by chance; every time where the link or
    the sweeper favours one arm)."""
    first = _a_a_winners(tmp_path_factory, "aa")
    if first:
        second = _a_a_winners(tmp_path_factory, "aa-again")
        assert not second, f"two A/A sweeps in a row named a winner: {first}, then {second}"
