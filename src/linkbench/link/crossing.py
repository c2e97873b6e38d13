"""The bytes each collective sends through each node's uplink of an emulated cluster, from the
algorithm the backend runs, so the interface counters can check them.

gloo on CPU tensors, as torch 2.14's ProcessGroupGloo calls it (read in its source and gloo's,
and counted per socket on 3 to 5 local ranks: every count matched):

- ``all_reduce``: gloo's ring (``AllreduceOptions`` left at its default algorithm); rank r
  sends only to rank r - 1: 2(n-1)/n of the tensor, in segments of at most 1 MiB.
- ``reduce_scatter`` (``reduce_scatter_tensor``, which FSDP calls): gloo has none of its own;
  ProcessGroupGloo all-reduces the whole input and keeps its rank's chunk, so it sends what
  an ``all_reduce`` of the input sends (twice a true reduce-scatter's bytes).
- ``all_gather`` (``all_gather_into_tensor``): gloo's ring the other way round, rank r to
  r + 1: (n-1)/n of the gathered tensor.
- ``broadcast``: a binomial tree from the source: the rank v places after it (modulo n)
  sends the whole tensor to v + 2^i for every 2^i > v with v + 2^i < n.

Each message also carries 48-byte headers (a notice and a header per send, a notice back per
receive): 96 bytes per segment of at most 1 MiB, under 0.01 % of a segment, left out. The
interface counters add a TCP/IP header per segmentation-offload packet (up to 64 KiB), about
0.1 %. NCCL chooses its algorithm per call (ring, tree) and its own ring order; its log says
which (``nccl_log``): that path is not predicted here yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple


class Call(NamedTuple):
    """One collective call of a step."""

    op: str
    size: float
    """Bytes of the whole tensor: the all-reduced, the gathered, or the reduce-scatter's
    input."""
    src: int = 0
    """A broadcast's source (a global rank)."""
    group: tuple[int, ...] = ()
    """The global ranks of its process group in the group's rank order (empty: the world)."""

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Call:
        """A call as ``result.json``'s ``link.per_step.calls`` records it."""
        return cls(record["op"], record["size"], record["src"], tuple(record["group"]))


PREDICTED_BACKENDS = ("gloo",)


def binomial_tree(world: int, src: int = 0) -> list[tuple[int, int]]:
    """(sender, receiver) positions of gloo's broadcast from position ``src`` over ``world``
    ranks."""
    edges = []
    for v in range(world):
        step = 1
        while step < world:
            if step > v and v + step < world:
                edges.append(((v + src) % world, (v + step + src) % world))
            step *= 2
    return edges


def pair_bytes(
    op: str, size_bytes: float, world: int, src: int = 0, group: Sequence[int] = ()
) -> dict[tuple[int, int], float]:
    """Payload bytes global rank a sends to global rank b, {(a, b): bytes}, for one gloo call
    of ``op`` on a tensor of ``size_bytes`` over ``group`` (default: the world's ranks)."""
    ranks = list(group) or list(range(world))
    n = len(ranks)
    if n < 2:
        return {}
    if op in ("all_reduce", "reduce_scatter"):
        at = {(i, (i - 1) % n): 2 * (n - 1) / n * size_bytes for i in range(n)}
    elif op == "all_gather":
        at = {(i, (i + 1) % n): (n - 1) / n * size_bytes for i in range(n)}
    elif op == "broadcast":
        at = dict.fromkeys(binomial_tree(n, ranks.index(src)), float(size_bytes))
    else:
        raise ValueError(f"no byte count for {op!r} on gloo")
    return {(ranks[a], ranks[b]): sent for (a, b), sent in at.items()}


Pairs = dict[tuple[int, int], float]
"""Bytes global rank a sends global rank b in one call: {(a, b): bytes}."""


def node_bytes_of(per_call: Iterable[Pairs], world: int, nodes: int) -> float:
    """Bytes the busiest rank sends inside its node, over the calls that cross no uplink:
    what the node's own path must carry at its pace. A call that crosses an uplink is paced
    by the uplink (the slower path) and counts there, not here. Any backend: ``per_call`` is
    each call's bytes from rank to rank."""
    per_node = world // nodes
    sent = [0.0] * world
    for pairs in per_call:
        if all(a // per_node == b // per_node for a, b in pairs):
            for (a, _), value in pairs.items():
                sent[a] += value
    return max(sent, default=0.0)


def uplink_bytes_of(per_call: Iterable[Pairs], world: int, nodes: int) -> list[dict[str, float]]:
    """Each node's uplink, the bytes it sends and receives for calls whose bytes from rank to
    rank are ``per_call`` (any backend), ranks in ``nodes`` nodes of equal size, rank r on
    node r // (world / nodes)."""
    per_node = world // nodes
    out = [{"node": k, "tx_bytes": 0.0, "rx_bytes": 0.0} for k in range(nodes)]
    for pairs in per_call:
        for (a, b), sent in pairs.items():
            if a // per_node != b // per_node:
                out[a // per_node]["tx_bytes"] += sent
                out[b // per_node]["rx_bytes"] += sent
    return out


def _gloo(calls: Iterable[Call], world: int) -> list[Pairs]:
    return [pair_bytes(c.op, c.size, world, c.src, c.group) for c in calls]


def node_bytes(calls: Iterable[Call], world: int, nodes: int) -> float:
    """:func:`node_bytes_of` for ``calls`` on gloo."""
    return node_bytes_of(_gloo(calls, world), world, nodes)


def uplink_bytes(calls: Iterable[Call], world: int, nodes: int) -> list[dict[str, float]]:
    """:func:`uplink_bytes_of` for ``calls`` on gloo."""
    return uplink_bytes_of(_gloo(calls, world), world, nodes)


def attach(seen: list[dict[str, float]], predicted: list[dict[str, float]]) -> float:
    """Set each node's predicted bytes (``predicted_tx_bytes_per_step`` and rx) beside what
    its counters saw; the busiest uplink's predicted bytes, one way."""
    for node, bytes_ in zip(seen, predicted, strict=True):
        node["predicted_tx_bytes_per_step"] = bytes_["tx_bytes"]
        node["predicted_rx_bytes_per_step"] = bytes_["rx_bytes"]
    return max(max(u["tx_bytes"], u["rx_bytes"]) for u in predicted)
