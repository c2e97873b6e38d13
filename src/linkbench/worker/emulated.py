"""A worker on an emulated link (``interconnect=emulated``): its namespace, its rendezvous
over the link, the link's measured rate (with a sentence when it falls well short of the rate
set, or reads above what the link carries) and the check of its own sockets.

The launcher made the run's namespaces (:mod:`linkbench.link.netns`); each worker moves into
its rank's before it opens a socket, and the ranks meet at a TCPStore that rank 0 serves on
its emulated address, so the rendezvous crosses the link too (the elastic agent's own store
on the host's loopback is out of the namespaces' reach).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from linkbench.link.emulated import (
    NODE_PROBE_CALLS,
    PROBE_BYTES,
    PROBE_MIN_CALLS,
    STORE_PORT,
    LinkSpec,
    above_limit,
    check_connections,
    entered,
    own_connections,
    payload_gb_s,
    probe_calls,
    rate_warning,
)
from linkbench.link.fabric import (
    MIN_NODES,
    WARM_BYTES,
    node_pairs,
    pair_bytes,
    slow_sentence,
    slow_uplinks,
    uplink_rates,
)
from linkbench.parts.rank import Rank
from linkbench.worker.collectives import time_collective

log = logging.getLogger("linkbench")


def store(spec: LinkSpec, rank: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    """The run's rendezvous store, served by rank 0 on its emulated address."""
    return dist.TCPStore(
        spec.store_address,
        STORE_PORT,
        world_size,
        is_master=rank == 0,
        timeout=timedelta(seconds=timeout_s),
    )


def measure(me: Rank, spec: LinkSpec | None = None) -> dict[str, Any]:
    """The link's bus bandwidth as the job sees it, before the task runs, by the task's own
    definition (``task=allreduce``'s row for PROBE_BYTES, :func:`linkbench.worker.collectives.
    time_collective`): one untimed all_reduce, then a window of back-to-back timed calls long
    enough that the token bucket's burst adds at most BUCKET_SHARE (every rank calls it).

    Where the reading is below what the rate of ``spec`` (by default the link this process
    entered) lets through by more than the allowed shortfall, ``rate_warning`` says so; where
    it is above what the link carries, ``above_limit`` says it is a measurement error. Rank 0
    logs either."""
    spec = spec or entered()
    calls = probe_calls(spec.slowest_gbit_s, me.world_size) if spec else PROBE_MIN_CALLS
    row = time_collective("all_reduce", PROBE_BYTES, "float32", 1, calls, me)
    busbw = row["busbw_gb_s"]
    measured: dict[str, Any] = {
        "measured_busbw_gb_s": busbw,
        "probe_bytes": PROBE_BYTES,
        "probe_calls": calls,
        "probe_window_s": row["time_us"] * calls / 1e6,
        "probe_window_s_max": row["time_us_max"] * calls / 1e6,
    }
    if spec is not None:
        said = {
            "rate_warning": rate_warning(spec, busbw),
            "above_limit": above_limit(spec, busbw, "the link probe"),
        }
        measured.update({k: v for k, v in said.items() if v})
    for sentence in (measured.get("rate_warning"), measured.get("above_limit")):
        if sentence and me.is_main:
            log.warning("!!! %s", sentence)
    return measured


def measure_nodes(me: Rank, spec: LinkSpec) -> dict[str, Any]:
    """The path inside a node (its ranks over the node's loopback, which no bucket shapes):
    the same all_reduce row as the link probe, each node's ranks in a group of their own,
    every node at once (as in a step, where every node's ranks share the host's cores). Its
    bus bandwidth paces the calls that stay inside the nodes. Empty with one rank a node;
    on one node it is the link probe's own reading (every call stays inside it)."""
    if spec.ranks_per_node < 2 or spec.node_count < 2:
        return {}
    groups = [dist.new_group(spec.node_ranks(n)) for n in range(spec.node_count)]
    try:
        mine = groups[spec.node_of(me.rank)]
        assert isinstance(mine, dist.ProcessGroup)  # every rank is in its own node's group
        row = time_collective("all_reduce", PROBE_BYTES, "float32", 1, NODE_PROBE_CALLS, me, mine)
    finally:
        for group in groups:
            dist.destroy_process_group(group)
    return {"node_busbw_gb_s": row["busbw_gb_s"], "node_probe_calls": NODE_PROBE_CALLS}


def measure_uplinks(me: Rank, spec: LinkSpec) -> dict[str, Any]:
    """Each node's uplink, by sends between the first ranks of each pair of nodes in turn,
    each way (:mod:`linkbench.link.fabric`; every rank calls it): each pair's pace (its faster
    way), each uplink's rate, and the uplinks that read slow, which rank 0 logs. Empty below
    MIN_NODES nodes (two make one pair: the link probe's ring)."""
    if spec.node_count < MIN_NODES:
        return {}
    leaders = [spec.node_ranks(node)[0] for node in range(spec.node_count)]
    pairs = node_pairs(spec.node_count)
    found = torch.zeros(len(pairs), 2, dtype=torch.float64, device=me.device)  # each way
    size = pair_bytes(payload_gb_s(spec.slowest_gbit_s))
    out = torch.ones(size // 4, device=me.device)
    back = torch.empty_like(out)
    for index, (a, b) in enumerate(pairs):
        for way, (sender, receiver) in enumerate(
            ((leaders[a], leaders[b]), (leaders[b], leaders[a]))
        ):
            dist.barrier()
            if me.rank == sender:
                found[index, way] = size / _one_way(out, back, receiver, me) / 1e9
            elif me.rank == receiver:
                _one_way(back, out, sender, me, sending=False)
    dist.all_reduce(found)  # one rank wrote each reading
    paces = [max(ways) for ways in found.tolist()]
    rates = uplink_rates(spec.node_count, paces)
    slow = slow_uplinks(rates)
    if me.is_main:
        for each in slow:
            log.warning("!!! %s", slow_sentence(each))
    return {
        "pair_bytes": size,
        "pairs_gb_s": {f"{a}-{b}": pace for (a, b), pace in zip(pairs, paces, strict=True)},
        "uplinks_measured_gb_s": rates,
        "slow_uplinks": slow,
    }


def _one_way(
    data: torch.Tensor, spare: torch.Tensor, peer: int, me: Rank, sending: bool = True
) -> float:
    """WARM_BYTES then ``data`` from the sender to ``peer`` (one way: a reply each way at
    once queues the other's acknowledgements behind its data, and halves both), each
    acknowledged by one element back; the seconds of the timed one, as the sender saw it."""
    warm, ack = data[: WARM_BYTES // 4], spare[:1]
    seconds = 0.0
    for part in (warm, data):
        started = time.perf_counter()
        if sending:
            dist.send(part, peer)
            dist.recv(ack, peer)
        else:
            dist.recv(part, peer)
            dist.send(ack, peer)
        if me.device.type == "cuda":
            torch.cuda.synchronize(me.device)
        seconds = time.perf_counter() - started
    return seconds


def check_sockets(
    spec: LinkSpec, me: Rank, earlier: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    """This rank's own TCP connections now and ``earlier`` (read while every rank's were
    open: after the link probe), checked against the link."""
    seen = sorted(set(own_connections()) | set(earlier or []))
    return check_connections(seen, spec, me.rank)


def interface_bytes(ifname: str) -> tuple[int, int] | None:
    """(sent, received) bytes of ``ifname`` so far, in this process's network namespace
    (``/proc/self/net/dev``, which follows the namespace a process entered; ``/sys/class/net``
    shows the one sysfs was mounted in); None where it has no such interface."""
    for line in Path("/proc/self/net/dev").read_text().splitlines()[2:]:
        name, _, fields = line.partition(":")
        if name.strip() == ifname:
            values = fields.split()
            return int(values[8]), int(values[0])
    return None


class UplinkCounter:
    """The bytes this rank's node sent and received through its uplink over the timed steps
    (the interface's own counters, which count TCP payload and one set of headers per
    segmentation-offload packet): what the strategy's bytes per step are checked against."""

    def __init__(self, spec: LinkSpec | None) -> None:
        self.spec = spec
        self._start: tuple[int, int] | None = None

    def start(self) -> None:
        if self.spec is not None:
            self._start = interface_bytes(self.spec.ifname)

    def stop(self, me: Rank, steps: int) -> list[dict[str, Any]] | None:
        """Every node's bytes per timed step, sent and received (collective: every rank
        calls it; one rank of each node reads for its node); None off an emulated link."""
        if self.spec is None:
            return None
        now = interface_bytes(self.spec.ifname)
        mine = None
        if self._start is not None and now is not None and steps:
            mine = {
                "node": self.spec.node_of(me.rank),
                "tx_bytes_per_step": (now[0] - self._start[0]) / steps,
                "rx_bytes_per_step": (now[1] - self._start[1]) / steps,
            }
        every: list[Any] = [None] * me.world_size
        dist.all_gather_object(every, mine)
        by_node = {r["node"]: r for r in every if r is not None}
        if len(by_node) < self.spec.node_count:
            return None
        return [by_node[n] for n in range(self.spec.node_count)]
