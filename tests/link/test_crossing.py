"""The bytes each gloo collective sends between ranks, and through each node's uplink of an
emulated cluster (:mod:`linkbench.link.crossing`), against counts made by hand: per socket on
3 to 5 local gloo ranks with torch 2.14 (``ss -ti``'s bytes sent), and the ring's algebra."""

from __future__ import annotations

import pytest

from linkbench.link.crossing import Call, binomial_tree, node_bytes, pair_bytes, uplink_bytes

MIB = 1 << 20


def test_gloo_all_reduce_is_a_ring_each_rank_sending_to_the_one_before():
    """Counted: 4 ranks, 12 MiB: rank r sent 18,876,096 bytes to r - 1 (2 x 3/4 x S and 96
    bytes of headers per segment) and only headers to r + 1."""
    sent = pair_bytes("all_reduce", 12 * MIB, 4)
    assert sent == {(r, (r - 1) % 4): 1.5 * 12 * MIB for r in range(4)}
    assert 18_876_096 - sent[(0, 3)] < 0.001 * sent[(0, 3)]


def test_gloo_reduce_scatter_sends_what_an_all_reduce_of_its_input_sends():
    """ProcessGroupGloo has no reduce-scatter of its own: it all-reduces the whole input."""
    assert pair_bytes("reduce_scatter", 3 * MIB, 3) == pair_bytes("all_reduce", 3 * MIB, 3)


def test_gloo_all_gather_is_a_ring_the_other_way():
    """Counted: 5 ranks, 4,000 bytes each: rank r sent 16,768 bytes to r + 1 (4 x 4,000 and
    headers)."""
    sent = pair_bytes("all_gather", 5 * 4000, 5)
    assert sent == {(r, (r + 1) % 5): 16_000 for r in range(5)}


def test_gloo_broadcast_is_a_binomial_tree_from_its_source():
    """Counted: 5 ranks from rank 0: 0->1, 0->2, 0->4, 1->3, each the whole tensor."""
    assert sorted(binomial_tree(5)) == [(0, 1), (0, 2), (0, 4), (1, 3)]
    assert sorted(pair_bytes("broadcast", 4000, 5, src=2)) == [(2, 1), (2, 3), (2, 4), (3, 0)]
    assert set(pair_bytes("broadcast", 4000, 5, src=2).values()) == {4000.0}


def test_a_subgroup_runs_its_ring_over_its_own_ranks():
    assert pair_bytes("all_reduce", 100.0, 4, group=(1, 3)) == {(1, 3): 100.0, (3, 1): 100.0}
    assert pair_bytes("all_reduce", 100.0, 4, group=(2,)) == {}
    with pytest.raises(ValueError, match="no byte count"):
        pair_bytes("all_to_all", 1.0, 4)


@pytest.mark.parametrize("nodes", [2, 4])
def test_a_ring_crosses_each_uplink_once_each_way(nodes):
    """Ranks in order on nodes of consecutive ranks: each node has one ring edge out and one
    in, so its uplink carries what each rank's link carries in a star: 2(n-1)/n of S."""
    found = uplink_bytes([Call("all_reduce", 8.0 * MIB)], 4, nodes)
    assert [(u["tx_bytes"], u["rx_bytes"]) for u in found] == [(1.5 * 8 * MIB,) * 2] * nodes


def test_the_strategies_send_what_their_groups_make_cross():
    """2 nodes x 2 ranks, gradients and parameters of B bytes: DDP's ring all-reduce sends
    1.5 B through each uplink; FSDP on gloo (its reduce-scatter an all-reduce) 3 B with its
    two all-gathers; HSDP only its shards' all-reduce across the nodes, B."""
    b = 1e6
    ddp = uplink_bytes([Call("all_reduce", b)], 4, 2)
    fsdp = uplink_bytes([Call("all_gather", 2 * b), Call("reduce_scatter", b)], 4, 2)
    rows, columns = [(0, 1), (2, 3)], [(0, 2), (1, 3)]
    hsdp = uplink_bytes(
        [Call(op, size, group=row) for row in rows
         for op, size in (("all_gather", 2 * b), ("reduce_scatter", b))]
        + [Call("all_reduce", b / 2, group=c) for c in columns],
        4, 2,
    )  # fmt: skip
    assert [u["tx_bytes"] for u in ddp] == [1.5 * b] * 2
    assert [u["tx_bytes"] for u in fsdp] == [3 * b] * 2
    assert [u["tx_bytes"] for u in hsdp] == [b] * 2
    # DDP's buffers from rank 0: the tree 0->1, 0->2, 1->3 crosses twice out of node 0.
    buffers = uplink_bytes([Call("broadcast", 400.0)], 4, 2)
    assert [(u["tx_bytes"], u["rx_bytes"]) for u in buffers] == [(800.0, 0.0), (0.0, 800.0)]


def test_only_the_calls_that_stay_inside_a_node_go_at_the_node_path_s_pace():
    """2 nodes x 2 ranks, B bytes: HSDP's gathers (2 B gathered, half sent by each rank) and
    its reduce-scatter (an all-reduce of B on gloo: B sent by each of 2 ranks) stay inside
    the nodes, 2 B from the busiest rank; its shards' all-reduce crosses, so the uplink paces
    it and it counts there. DDP's world ring crosses: nothing goes at the node's pace; one
    node: everything does; one rank a node: nothing."""
    b = 1e6
    rows, columns = [(0, 1), (2, 3)], [(0, 2), (1, 3)]
    hsdp = [Call(op, size, group=row) for row in rows
            for op, size in (("all_gather", 2 * b), ("reduce_scatter", b))]  # fmt: skip
    hsdp += [Call("all_reduce", b / 2, group=c) for c in columns]
    assert node_bytes(hsdp, 4, 2) == 2 * b
    ddp = [Call("all_reduce", b), Call("broadcast", 400.0)]
    assert node_bytes(ddp, 4, 2) == 0.0
    assert node_bytes(ddp, 4, 1) == 1.5 * b + 800.0  # rank 0: its ring share, 0->1 and 0->2
    assert node_bytes(hsdp, 4, 4) == 0.0
