"""The bytes NCCL's calls send through each node's uplink, read from a replayed log of an
emulated cluster of 2 nodes x 2 ranks (:mod:`linkbench.link.nccl_bytes`), against counts
made by hand from the graph the log shows."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from linkbench.launcher.job import nccl_uplinks
from linkbench.link.crossing import Call, node_bytes_of, uplink_bytes_of
from linkbench.link.emulated import LinkSpec
from linkbench.link.nccl_bytes import NotModelled, pair_bytes, placed, predict, read_graph

LOG = Path(__file__).parent / "data" / "nccl" / "nccl-2.28-2x2-socket-constructed.log"
S = 40e6


@pytest.fixture
def graph():
    return read_graph(LOG.read_text().splitlines(), world=4)


def test_the_world_s_rings_and_trees_are_read_and_a_subcommunicator_s_left_out(graph):
    assert graph.rings == {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}
    assert graph.trees[0] == {0: (-1, [1, 2]), 1: (0, []), 2: (0, [3]), 3: (2, [])}
    assert graph.trees[1][2] == (-1, [3, 0]) and graph.trees[1][0] == (2, [1])
    # The 2-rank communicator's ring and tree are another's: a 4-rank read never sees them.
    assert read_graph(LOG.read_text().splitlines(), world=2).rings == {0: [0, 1]}
    # NCCL chose Ring/Simple for the 25 MiB all-reduces, Tree/LL128 at 64 KiB, Ring/LL for
    # the broadcast: each call is priced by the choice for the calls nearest its size.
    assert graph.choice("all_reduce", 40e6) == ("Ring", "Simple")
    assert graph.choice("all_reduce", 50e3) == ("Tree", "LL128")
    assert graph.choice("broadcast", 38560) == ("Ring", "LL")


def test_a_ring_all_reduce_crosses_each_uplink_once_each_way_per_channel(graph):
    """Ring 0 1 2 3 on both channels, half the data each: 1 -> 2 and 3 -> 0 cross,
    2 x 3/4 of S/2 each per channel: 1.5 S each way, as gloo's ring."""
    found = uplink_bytes_of(placed([Call("all_reduce", S)], graph, 4), 4, 2)
    assert [(u["tx_bytes"], u["rx_bytes"]) for u in found] == [(1.5 * S, 1.5 * S)] * 2


def test_a_tree_all_reduce_sends_its_share_up_and_down_each_tree(graph):
    """The double binary tree across the two nodes: on each channel the heads (ranks 0 and
    2) exchange S/2 up (reduce) and S/2 down (broadcast): S each way, against the ring's
    1.5 S; LL128 carries 128 bytes per 120 of data."""
    sent = pair_bytes(Call("all_reduce", S), "Tree", "Simple", graph)
    assert sent[(0, 2)] == sent[(2, 0)] == S and sent[(1, 0)] == S / 2 * 2
    crossing = sum(b for (a, c), b in sent.items() if a // 2 != c // 2 and a < 2)
    assert crossing == S
    ll128 = pair_bytes(Call("all_reduce", S), "Tree", "LL128", graph)
    assert ll128[(0, 2)] == pytest.approx(S * 128 / 120)


def test_a_broadcast_on_the_ll_protocol_sends_its_flags_too(graph):
    """Ring/LL from rank 0: the chain 0 -> 1 -> 2 -> 3 crosses once, out of node 0, at 8
    bytes for every 4 of data."""
    found = uplink_bytes_of(placed([Call("broadcast", 1000.0)], graph, 4), 4, 2)
    assert [(u["tx_bytes"], u["rx_bytes"]) for u in found] == [(2000.0, 0.0), (0.0, 2000.0)]


def test_what_is_not_modelled_is_named_not_guessed(graph):
    with pytest.raises(NotModelled, match="algorithm NVLS"):
        pair_bytes(Call("all_reduce", S), "NVLS", "Simple", graph)
    with pytest.raises(NotModelled, match="no TUNING line for AllGather"):
        uplink_bytes_of(placed([Call("all_gather", S)], graph, 4), 4, 2)
    with pytest.raises(NotModelled, match="subgroup"):
        uplink_bytes_of(placed([Call("all_reduce", S, group=(0, 2))], graph, 4), 4, 2)


def test_a_job_s_record_gets_each_uplink_predicted_from_its_log():
    per_step = {
        "calls": [{"op": "all_reduce", "size": S, "src": 0, "group": []}],
        "uplinks": [{"node": n, "tx_bytes_per_step": 1.5 * S, "rx_bytes_per_step": 1.5 * S}
                    for n in range(2)],
    }  # fmt: skip
    found = predict(per_step, LOG.read_text().splitlines(), 4, 2)
    assert found == {"uplink_bytes_per_step_predicted": 1.5 * S,
                     "node_bytes_per_step_predicted": 0.0}  # fmt: skip
    assert per_step["nccl_choices"] == {"all_reduce": "Ring/Simple"}
    assert per_step["uplinks"][0]["predicted_tx_bytes_per_step"] == 1.5 * S
    no_tuning = [line for line in LOG.read_text().splitlines() if "Bytes ->" not in line]
    per_step.pop("nccl_choices")
    assert predict(per_step, no_tuning, 4, 2) == {}
    assert "no TUNING line for AllReduce" in per_step["not_predicted"]


def test_the_launcher_predicts_a_nccl_job_s_uplinks_from_the_logs_its_ranks_left(tmp_path):
    """Each rank's NCCL_DEBUG_FILE, read one after another after the job: the job's record
    gains each uplink's predicted bytes and the busiest as the metric."""
    lines = LOG.read_text().splitlines(keepends=True)
    for rank, part in enumerate((lines[:8], lines[8:11], lines[11:14], lines[14:])):
        (tmp_path / f"nccl.rank{rank}.log").write_text("".join(part))
    plan = SimpleNamespace(log_dir=tmp_path, link=LinkSpec("0123abcd", 1.0, 0.0, 0.0, 4, 2))
    per_step = {
        "calls": [{"op": "all_reduce", "size": S, "src": 0, "group": []}],
        "uplinks": [{"node": n, "tx_bytes_per_step": 0.0, "rx_bytes_per_step": 0.0}
                    for n in range(2)],
    }  # fmt: skip
    found = nccl_uplinks(plan, per_step)
    assert found["uplink_bytes_per_step_predicted"] == 1.5 * S
    assert per_step["uplinks"][1]["predicted_rx_bytes_per_step"] == 1.5 * S


def test_the_numbers_of_nccl_2_23_s_tuning_lines_are_read_as_names():
    """2.23 prints ``Algo 1 proto 2`` (NCCL's numbering: Ring, Simple)."""
    lines = [
        *LOG.read_text().splitlines()[:8],
        "n0:7101:7101 [0] NCCL INFO AllReduce: 26214400 Bytes -> Algo 0 proto 1 time 9.5",
    ]
    graph = read_graph(lines, world=4)
    assert graph.choice("all_reduce", S) == ("Tree", "LL128")


def test_on_one_node_every_call_stays_inside_at_the_node_s_pace():
    """One node of 4 ranks: nothing crosses an uplink, and the ring's 1.5 S is what the
    busiest rank sends inside the node."""
    graph = read_graph(LOG.read_text().splitlines(), world=4)
    assert uplink_bytes_of(placed([Call("all_reduce", S)], graph, 4), 4, 1)[0]["tx_bytes"] == 0.0
    assert node_bytes_of(placed([Call("all_reduce", S)], graph, 4), 4, 1) == pytest.approx(1.5 * S)
    assert node_bytes_of(placed([Call("all_reduce", S)], graph, 4), 4, 2) == 0.0
