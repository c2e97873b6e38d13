"""A slow uplink named by measurement (:mod:`linkbench.link.fabric`), by simulation whose
truth is chosen: nodes of set rates, each pair read at the slower of its two uplinks' pace
with a noise of up to 5 % (real readings: 0.1-0.3 % off the payload rate, 2026-12-07)."""

from __future__ import annotations

import random

import pytest

from linkbench.link.fabric import (
    PAIR_BYTES,
    WARM_BYTES,
    node_pairs,
    pair_bytes,
    slow_sentence,
    slow_uplinks,
    uplink_rates,
)

NOISE = 0.05


def _read(rates: list[float], rng: random.Random) -> list[float]:
    """Each pair's reading: the slower uplink's rate, off by up to NOISE either way."""
    return [
        min(rates[a], rates[b]) * (1 + rng.uniform(-NOISE, NOISE))
        for a, b in node_pairs(len(rates))
    ]


@pytest.mark.parametrize("share", [0.5, 0.25])
def test_one_degraded_uplink_is_named_with_its_rate_every_time(share):
    """3 to 8 nodes at 0.12 GB/s, one at half or a quarter: named, alone, with its rate
    within 10 %, in every one of 600 draws."""
    rng = random.Random(7)
    for _ in range(600):
        nodes = rng.randint(3, 8)
        slow = rng.randrange(nodes)
        rates = [0.12] * nodes
        rates[slow] = 0.12 * share
        found = slow_uplinks(uplink_rates(nodes, _read(rates, rng)))
        assert [f["node"] for f in found] == [slow], (rates, found)
        assert abs(found[0]["gb_s"] / rates[slow] - 1) < 0.10


def test_a_healthy_fabric_names_no_uplink():
    """No false alarm in 2,000 draws: naming needs an uplink 25 % below the others' median,
    which a noise of 5 % either way cannot make (it takes pairs read 14 % apart)."""
    rng = random.Random(11)
    for _ in range(2000):
        nodes = rng.randint(3, 8)
        assert slow_uplinks(uplink_rates(nodes, _read([0.12] * nodes, rng))) == []


def test_two_degraded_uplinks_of_four_are_both_named():
    rates = [0.12, 0.06, 0.12, 0.03]
    found = slow_uplinks(uplink_rates(4, _read(rates, random.Random(3))))
    assert [f["node"] for f in found] == [1, 3]


def test_two_nodes_make_one_pair_which_names_no_uplink():
    """One pair's pace cannot say which of its two uplinks set it."""
    assert uplink_rates(2, [0.03]) == [0.03, 0.03]
    assert slow_uplinks([0.03, 0.03]) == []


def test_the_sentence_names_the_node_and_its_measured_rate():
    [found] = slow_uplinks(uplink_rates(3, [0.03, 0.12, 0.03]))
    sentence = slow_sentence(found)
    assert sentence.startswith("node 1's uplink measured 0.03 GB/s, 25% of the other")
    assert "\n" not in sentence


def test_a_timed_send_lasts_about_a_quarter_second_at_the_slowest_rate():
    assert pair_bytes(0.12) == PAIR_BYTES  # 1 Gbit/s: 8 MiB, 70 ms
    assert pair_bytes(0.03) == 7 << 20  # 0.25 Gbit/s: 7 MiB, 0.24 s
    assert pair_bytes(0.001) == WARM_BYTES
