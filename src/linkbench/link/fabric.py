"""Each node's uplink measured, and a slow one named, without reading the link's settings.

The launcher's link probe reads a ring through every node: the slowest uplink's pace, but
not which uplink that is. So every emulated job of MIN_NODES or more nodes also sends
pair_bytes between the first ranks of each pair of nodes in turn, one way then the other
(each after WARM_BYTES that empty the token buckets, so no stored burst flatters the timed
send; both ways at once would queue each way's acknowledgements behind the other's data and
halve both): a pair moves at the pace of the slower of its two uplinks. An uplink's rate is
then the fastest pair it took part in (with a partner at least as fast, the pair ran at its
own pace), and an uplink is named slow where that reads below SLOW_SHARE of the median of
the others'. Two nodes make one pair, whose pace the link probe already reads and whose
slower uplink cannot be told apart: no sends there. The standard library only: the worker
measures (:mod:`linkbench.worker.emulated`), this module decides.
"""

from __future__ import annotations

import statistics
from itertools import combinations
from typing import Any

PAIR_BYTES = 8 << 20
"""The most each timed send carries (at most PAIR_S at the slowest uplink's rate, at least
WARM_BYTES: the size follows the rates set, the verdict only what was measured)."""
PAIR_S = 0.25
WARM_BYTES = 1 << 20
MIN_NODES = 3
"""The fewest nodes whose pairs tell a slow uplink apart (two make one pair)."""
SLOW_SHARE = 0.75
"""An uplink reading below this share of the median of the others' is named slow."""


def pair_bytes(slowest_payload_gb_s: float) -> int:
    """Each timed send's bytes, whole MiB: PAIR_S at the slowest uplink's payload rate,
    between WARM_BYTES and PAIR_BYTES."""
    wanted = int(slowest_payload_gb_s * 1e9 * PAIR_S) >> 20 << 20
    return min(PAIR_BYTES, max(WARM_BYTES, wanted))


def node_pairs(nodes: int) -> list[tuple[int, int]]:
    """Every pair of nodes, in the order they are measured."""
    return list(combinations(range(nodes), 2))


def uplink_rates(nodes: int, pair_gb_s: list[float]) -> list[float]:
    """Each node's uplink rate (GB/s): the fastest of the pairs it took part in
    (``pair_gb_s`` in :func:`node_pairs`'s order)."""
    fastest = [0.0] * nodes
    for (a, b), rate in zip(node_pairs(nodes), pair_gb_s, strict=True):
        fastest[a], fastest[b] = max(fastest[a], rate), max(fastest[b], rate)
    return fastest


def slow_uplinks(rates: list[float]) -> list[dict[str, Any]]:
    """The uplinks that read below SLOW_SHARE of the median of the others' (MIN_NODES at
    least: with two, one pair cannot tell which uplink set its pace)."""
    if len(rates) < MIN_NODES:
        return []
    found = []
    for node, rate in enumerate(rates):
        others = statistics.median(r for n, r in enumerate(rates) if n != node)
        if others > 0 and rate < SLOW_SHARE * others:
            found.append({"node": node, "gb_s": rate, "others_gb_s": others,
                          "share": rate / others})  # fmt: skip
    return found


def slow_sentence(slow: dict[str, Any]) -> str:
    """One slow uplink, named with its measured rate."""
    return (
        f"node {slow['node']}'s uplink measured {slow['gb_s']:.4g} GB/s, {slow['share']:.0%} "
        f"of the other uplinks' {slow['others_gb_s']:.4g} GB/s (median): a slow link, found "
        "by exchanges between each pair of nodes"
    )
