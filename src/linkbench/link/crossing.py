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

from collections.abc import Iterable

Call = tuple[str, float, int]
"""One collective call: (op, bytes of the whole tensor, the source rank of a broadcast)."""

PREDICTED_BACKENDS = ("gloo",)


def binomial_tree(world: int, src: int = 0) -> list[tuple[int, int]]:
    """(sender, receiver) of gloo's broadcast from ``src`` over ``world`` ranks."""
    edges = []
    for v in range(world):
        step = 1
        while step < world:
            if step > v and v + step < world:
                edges.append(((v + src) % world, (v + step + src) % world))
            step *= 2
    return edges


def pair_bytes(
    op: str, size_bytes: float, world: int, src: int = 0
) -> dict[tuple[int, int], float]:
    """Payload bytes rank a sends to rank b, {(a, b): bytes}, for one gloo call of ``op`` on
    a tensor of ``size_bytes`` (the all-reduced, the gathered, or the reduce-scatter's input)."""
    n = world
    if n < 2:
        return {}
    if op in ("all_reduce", "reduce_scatter"):
        return {(r, (r - 1) % n): 2 * (n - 1) / n * size_bytes for r in range(n)}
    if op == "all_gather":
        return {(r, (r + 1) % n): (n - 1) / n * size_bytes for r in range(n)}
    if op == "broadcast":
        return dict.fromkeys(binomial_tree(n, src), float(size_bytes))
    raise ValueError(f"no byte count for {op!r} on gloo")


def uplink_bytes(calls: Iterable[Call], world: int, nodes: int) -> list[dict[str, float]]:
    """Each node's uplink, the bytes it sends and receives for ``calls`` (gloo), ranks in
    ``nodes`` nodes of equal size, rank r on node r // (world / nodes)."""
    per_node = world // nodes
    out = [{"node": k, "tx_bytes": 0.0, "rx_bytes": 0.0} for k in range(nodes)]
    for op, size, src in calls:
        for (a, b), sent in pair_bytes(op, size, world, src).items():
            if a // per_node != b // per_node:
                out[a // per_node]["tx_bytes"] += sent
                out[b // per_node]["rx_bytes"] += sent
    return out
