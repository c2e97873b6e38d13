"""The projection of an emulated cluster the box did not run (:mod:`linkbench.analysis.
cluster`), on jobs whose truth was chosen, and its refusals: one sentence each."""

from __future__ import annotations

import json

import pytest

from linkbench.analysis.cluster import ClusterError, core_share, measured, parse_cluster, predict
from linkbench.analysis.projection import main

from .fakes import BESIDE_A_HOG, OWN_ONLY, run_conditions

B = 40e6  # gradient bytes


def _result(world: int, nodes: int, busbw: float, strategy: str = "ddp", **trace) -> dict:
    """A traced job on an emulated link whose truth is chosen: B of gradients."""
    calls = [{"op": "all_reduce", "size": B, "src": 0, "group": []}]
    if strategy == "fsdp":
        calls = [{"op": "all_gather", "size": 2 * B, "src": 0, "group": []},
                 {"op": "reduce_scatter", "size": B, "src": 0, "group": []}]  # fmt: skip
    if strategy == "hsdp":  # one replica a node, one rank a node: shard groups of one
        calls = [
            {"op": op, "size": size, "src": 0, "group": [r]}
            for r in range(world)
            for op, size in (("all_gather", 2 * B), ("reduce_scatter", B))
        ]
        calls.append({"op": "all_reduce", "size": B, "src": 0, "group": list(range(world))})
    mean = {"compute_only_ms": 80.0, "overlapped_ms": 20.0, "exposed_comm_ms": 180.0,
            "other_ms": 10.0, **trace}  # fmt: skip
    return {
        "task": "train", "world_size": world, "strategy": strategy,
        "link": {"nodes": nodes, "measured_busbw_gb_s": busbw, "per_step": {"calls": calls}},
        "trace": {"mean": mean}, "conditions": [{"start": {"cpus": 4, "cpus_usable": 2}}],
        "metrics": {},
    }  # fmt: skip


def test_two_nodes_of_two_ranks_from_one_rank_a_node_and_one_node():
    """DDP: the 4-rank ring sends 1.5 B through each uplink (2 nodes x 1 rank sent B); all
    of it crosses, so none goes at the inside pace; 4 ranks share 2 cores, so computing
    (110 ms with the rest) takes twice as long; 10 % of the communication stays hidden."""
    between = measured(_result(2, 2, 0.06), "between")
    p = predict(between, 0.7, 2, 2)
    comm = 1.5 * B / 0.06 / 1e6
    assert p["uplink_bytes"] == 1.5 * B and p["inside_bytes"] == 0.0
    assert p["compute_ms"] == pytest.approx(220.0) and p["core_share"] == 2.0
    assert p["step_ms"] == pytest.approx(220.0 + comm - 0.1 * comm)
    # One node of 4 ranks: everything stays inside, at the inside pace.
    one = predict(between, 0.7, 1, 4)
    assert one["uplink_bytes"] == 0 and one["comm_ms"] == pytest.approx(1.5 * B / 0.7 / 1e6)
    # FSDP on gloo: two gathers and a reduce-scatter run as an all-reduce: 3 B each way.
    fsdp = predict(measured(_result(2, 2, 0.06, "fsdp"), "b"), 0.7, 2, 2)
    assert fsdp["uplink_bytes"] == pytest.approx(3 * B)


def test_hsdp_is_placed_on_its_mesh_one_replica_a_node():
    """Measured on 2 nodes x 1 rank (shard groups of one), placed on 2 x 2: each node's two
    ranks gather 2 B and reduce-scatter B among themselves (2 B sent by each rank over the
    node's path), and each rank's half-shard crosses in an all-reduce per column: B each way
    through each uplink."""
    between = measured(_result(2, 2, 0.06, "hsdp"), "between")
    p = predict(between, 0.7, 2, 2)
    assert p["uplink_bytes"] == pytest.approx(B) and p["inside_bytes"] == pytest.approx(2 * B)
    assert p["comm_ms"] == pytest.approx(B / 0.06 / 1e6 + 2 * B / 0.7 / 1e6)
    with pytest.raises(ClusterError, match="hsdp replicates across nodes"):
        predict(between, 0.7, 1, 4)


def test_a_rank_s_computing_goes_with_its_threads_then_its_share_of_the_cores():
    """2 cores: 1 rank runs 2 threads, 2 ranks 1 each, 4 ranks share 2 cores (twice as long
    as 2 ranks). 16 cores: 2 ranks run 8 threads each, 4 ranks 4 each: twice as long too,
    the same work on the same cores in all."""
    assert core_share(2, 1) == 0.5 and core_share(2, 2) == 1.0 and core_share(2, 4) == 2.0
    assert core_share(16, 4) / core_share(16, 2) == 2.0
    assert core_share(16, 32) == 2.0  # 32 ranks of 1 thread on 16 cores


@pytest.mark.parametrize(
    ("text", "fix"), [("2", "NODESxRANKS"), ("0x2", "NODESxRANKS"), ("axb", "NODESxRANKS")]
)
def test_a_malformed_cluster_is_refused(text, fix):
    with pytest.raises(ClusterError, match=fix):
        parse_cluster(text)
    assert parse_cluster("4X8") == (4, 8)


@pytest.mark.parametrize(
    ("between", "inside", "says"),
    [
        (_result(4, 2, 0.06), _result(2, 1, 0.7), "one rank a node"),
        (_result(2, 2, 0.06), _result(2, 2, 0.06), "interconnect.nodes=1"),
        (_result(2, 2, 0.06, "zero1"), _result(2, 1, 0.7), "only ddp, fsdp, hsdp are projected"),
    ],
)
def test_jobs_that_cannot_stand_for_a_link_class_are_refused(tmp_path, capsys, between, inside,
                                                              says):  # fmt: skip
    for name, result in (("b", between), ("i", inside)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(result))
    code = main([str(tmp_path / "b"), "--cluster", "2x2", "--inside", str(tmp_path / "i")])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_the_command_refuses_what_is_missing_in_one_sentence(tmp_path, capsys):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "result.json").write_text(json.dumps(_result(2, 2, 0.06)))
    assert main([str(tmp_path / "b"), "--cluster", "2x2"]) == 2
    assert "go together" in capsys.readouterr().err
    assert main([str(tmp_path / "b"), "--cluster", "2x2", "--inside", str(tmp_path)]) == 2
    assert "missing or not JSON" in capsys.readouterr().err
    no_link = {**_result(2, 1, 0.7), "link": {}}
    no_steps = {**_result(2, 2, 0.06), "trace": {}}
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "result.json").write_text(json.dumps(no_steps))
    assert main([str(tmp_path / "n"), "--cluster", "2x2", "--inside", str(tmp_path / "b")]) == 2
    assert "profile=trace" in capsys.readouterr().err
    (tmp_path / "i").mkdir()
    (tmp_path / "i" / "result.json").write_text(json.dumps(no_link))
    assert main([str(tmp_path / "b"), "--cluster", "2x2", "--inside", str(tmp_path / "i")]) == 2
    assert "interconnect=emulated" in capsys.readouterr().err


def test_the_command_prints_the_prediction_with_its_inputs(tmp_path, capsys):
    for name, result in (("b", _result(2, 2, 0.06)), ("i", _result(2, 1, 0.7))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(result))
    assert main([str(tmp_path / "b"), "--cluster", "2x2", "--inside", str(tmp_path / "i")]) == 0
    out = capsys.readouterr().out
    assert "2 nodes x 2 ranks, ddp: predicted" in out and "60.00 MB through" in out
    assert main([str(tmp_path / "b"), "--cluster", "2x2", "--inside", str(tmp_path / "i"),
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["uplink_bytes"] == 1.5 * B


@pytest.mark.parametrize(
    ("runs", "words"),
    [([run_conditions(4.5, OWN_ONLY), run_conditions(4.5, OWN_ONLY)],
      "on a quiet host (in the between-nodes job, other programs kept 0.05 of its 2 usable"),
     ([run_conditions(4.5, BESIDE_A_HOG), run_conditions(4.5, OWN_ONLY)],
      "busy host (in the between-nodes job, other programs kept 0.90 of its 2 usable cores "
      "busy; in the inside-a-node job, other programs kept 0.05 of its 2 usable cores busy): "
      "in the between-nodes job, so this prediction is not held to 15 %"),
     ([run_conditions(1.2), run_conditions(0.8)],
      "on a quiet host (in the between-nodes job, the host's load reached 1.2 on 2 usable cores"),
     ([run_conditions(8.5), run_conditions(1.0)],
      "in the between-nodes job, so this prediction is not held to 15 %"),
     ([None, None], "recorded no host load")],
)  # fmt: skip
def test_the_projection_says_how_busy_the_host_was_under_its_inputs(tmp_path, capsys, runs, words):
    """Before: on a busy host (load 5-14) HSDP's projection read +30 % and -18 % with no word
    that its computing and inside-a-node pace came from runs that shared their cores. The
    load average counts a run's own ranks (4 on 2 cores read above the cores on a quiet
    host, and in CI); where a run recorded its CPU seconds, the other programs' share is
    what counts."""
    for name, result, run in (("b", _result(2, 2, 0.06), runs[0]),
                              ("i", _result(2, 1, 0.7), runs[1])):  # fmt: skip
        result["conditions"] = [] if run is None else [run]
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(result))
    args = [str(tmp_path / "b"), "--cluster", "2x2", "--inside", str(tmp_path / "i")]
    assert main(args) == 0
    assert words in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    assert words in json.loads(capsys.readouterr().out)["inputs_load"]
