"""The bytes NCCL's calls send through each node's uplink, from what its own log says it built
and chose: the graph (the ring of every channel, each rank's tree) and, per call, the
algorithm and protocol (its TUNING lines).

What NCCL prints, and how it is read (NCCL's INFO log with ``NCCL_DEBUG_SUBSYS`` INIT,GRAPH
and TUNING, as linkbench sets it):

- ``Channel 00/02 :   0   1   3   2``: the ring of channel 0, in order (rank 0 prints every
  channel's; src/graph/rings.cc). A ring call splits its data over the channels; on
  channel c rank r sends to the rank after it: 2(n-1)/n of its share for AllReduce,
  (n-1)/n of the whole gathered (or scattered) array's for AllGather and ReduceScatter, the
  whole share for Broadcast along the chain from the root (every rank but the last).
- ``Trees [0] 2/-1/-1->0->-1 [1] -1/-1/-1->0->1 comm 0x... nRanks 04 busId 1000``: this
  rank's tree on each channel, ``child/child/child->rank->parent`` (-1: none; every rank
  prints its own; src/init.cc). A tree
  AllReduce reduces its share up to the root and broadcasts it down: each rank sends the
  share to its parent and to each child.
- ``AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE ...`` (2.24+; 2.23 prints numbers,
  ``Algo 1 proto 2``; both name the collective and the bytes of the call): the algorithm and
  protocol of that call. A step's call is given the choice NCCL made most often for the
  calls of that collective nearest in size (on a log scale), so the link and node probes'
  8 MiB calls price a training call only where the training's own calls are farther off.
- The protocol's flags travel with the data: LL sends 8 bytes per 4 of data, LL128 128 per
  120, Simple the data alone (NVIDIA/nccl#281, sjeaugey: "LL maximum bandwidth 50% of the
  peak ... LL128 can achieve 95% peak").

Ranks are on nodes of consecutive ranks (``localRanks`` each), as torchrun numbers them. NVLS,
CollNet and PAT are not modelled: such a call is named, not guessed.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from linkbench.link.crossing import Call, Pairs, attach, node_bytes_of, uplink_bytes_of
from linkbench.link.nccl_log import choice_names, records

_RING = re.compile(r"^Channel (\d+)/(\d+) :((?:\s+\d+)+)\s*$")
_TREES = re.compile(r"\[(\d+)\]\s+(-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)")
_COMM = re.compile(r"^comm \S+ rank \d+ nRanks (\d+)")
_NRANKS = re.compile(r"\bnRanks (\d+)")
_TUNING = re.compile(r"^([A-Za-z]+): (\d+) Bytes -> Algo (\S+) proto (\S+)")
WIRE = {"LL": 2.0, "LL128": 128 / 120, "Simple": 1.0}
# A step's calls (linkbench.link.crossing.Call) by NCCL's names.
NCCL_NAMES = {
    "all_reduce": "AllReduce",
    "all_gather": "AllGather",
    "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast",
}


class NotModelled(ValueError):
    """What the log shows cannot be turned into bytes here; the message says what."""


@dataclass
class Graph:
    """What NCCL built and chose, read from its log."""

    rings: dict[int, list[int]] = field(default_factory=dict)
    """Channel -> the ranks of its ring, in order."""
    trees: dict[int, dict[int, tuple[int, list[int]]]] = field(default_factory=dict)
    """Channel -> rank -> (parent, children); -1 for none."""
    chosen: dict[str, Counter[tuple[int, str, str]]] = field(default_factory=dict)
    """Collective -> how many calls of (bytes, algorithm, protocol)."""

    def choice(self, op: str, size: float) -> tuple[str, str]:
        """The (algorithm, protocol) NCCL chose most often for the calls of ``op`` nearest
        in size to ``size`` bytes (on a log scale)."""
        name = NCCL_NAMES.get(op, op)
        found = self.chosen.get(name)
        if not found:
            raise NotModelled(
                f"the log has no TUNING line for {name}: run with NCCL_DEBUG_SUBSYS including "
                "TUNING (linkbench sets it unless NCCL_DEBUG is set)"
            )
        nearest = min({b for b, _, _ in found}, key=lambda b: abs(math.log(max(b, 1) / size)))
        at = Counter({(a, p): n for (b, a, p), n in found.items() if b == nearest})
        return at.most_common(1)[0][0]


def _size(trees: str, current: int) -> int:
    """The communicator size a Trees line names (2.19+), else the last ``comm`` line's."""
    found = _NRANKS.search(trees)
    return int(found.group(1)) if found else current


def read_graph(lines: Iterable[str], world: int) -> Graph:
    """The rings and trees of the communicator of ``world`` ranks, and the per-call choices,
    in NCCL log lines (one rank's file after another). A ring is the world's when it holds
    ``world`` ranks; a Trees line, when it names ``nRanks`` of the world (2.19+) or, in older
    logs, when the last ``comm ... nRanks N`` line before it did."""
    graph = Graph()
    current = world
    for line in lines:
        for _, body in records(line):
            if m := _COMM.search(body):
                current = int(m.group(1))
            if m := _TUNING.match(body):
                algo, proto = choice_names(m.group(3), m.group(4))
                graph.chosen.setdefault(m.group(1), Counter())[int(m.group(2)), algo, proto] += 1
            if (m := _RING.match(body)) and len(m.group(3).split()) == world:
                graph.rings[int(m.group(1))] = [int(r) for r in m.group(3).split()]
            elif body.startswith("Trees") and _size(body, current) == world:
                for m in _TREES.finditer(body):
                    children = [int(c) for c in m.group(2, 3, 4) if int(c) >= 0]
                    channel = graph.trees.setdefault(int(m.group(1)), {})
                    channel[int(m.group(5))] = (int(m.group(6)), children)
    return graph


def _ring_pairs(op: str, share: float, ring: list[int], root: int) -> dict[tuple[int, int], float]:
    n = len(ring)
    nxt = {ring[i]: ring[(i + 1) % n] for i in range(n)}
    if op == "all_reduce":
        return {(r, nxt[r]): 2 * (n - 1) / n * share for r in ring}
    if op in ("all_gather", "reduce_scatter"):
        return {(r, nxt[r]): (n - 1) / n * share for r in ring}
    if op == "broadcast":  # the chain from the root: every rank but the one before it sends
        last = ring[(ring.index(root) - 1) % n]
        return {(r, nxt[r]): share for r in ring if r != last}
    raise NotModelled(f"no ring byte count for {op}")


def pair_bytes(call: Call, algo: str, proto: str, graph: Graph) -> Pairs:
    """Bytes on the wire rank a sends rank b for one call of ``call.size`` bytes (the whole
    tensor, as :class:`linkbench.link.crossing.Call` counts it) under NCCL's choice."""
    if proto not in WIRE:
        raise NotModelled(f"protocol {proto}")
    wire = WIRE[proto]
    out: Pairs = {}
    if algo == "Ring":
        if not graph.rings:
            raise NotModelled("the log has no ring (Channel NN/MM : ranks) line")
        share = call.size * wire / len(graph.rings)
        for ring in graph.rings.values():
            for pair, sent in _ring_pairs(call.op, share, ring, call.src).items():
                out[pair] = out.get(pair, 0.0) + sent
    elif algo == "Tree" and call.op == "all_reduce":
        if not graph.trees:
            raise NotModelled("the log has no Trees line")
        share = call.size * wire / len(graph.trees)
        for tree in graph.trees.values():
            for rank, (parent, children) in tree.items():
                for peer in ([parent] if parent >= 0 else []) + children:
                    out[rank, peer] = out.get((rank, peer), 0.0) + share
    else:
        raise NotModelled(f"{NCCL_NAMES.get(call.op, call.op)} with algorithm {algo}")
    return out


def placed(calls: Iterable[Call], graph: Graph, world: int) -> list[Pairs]:
    """Each call's bytes from rank to rank on the wire, under NCCL's choice for it (for
    :func:`linkbench.link.crossing.uplink_bytes_of` and ``node_bytes_of``)."""
    out = []
    for call in calls:
        if call.group and len(call.group) != world:
            raise NotModelled("a call on a subgroup: its communicator's log is its own")
        algo, proto = graph.choice(call.op, call.size)
        out.append(pair_bytes(call, algo, proto, graph))
    return out


def predict(per_step: dict, lines: Iterable[str], world: int, nodes: int) -> dict[str, float]:
    """A NCCL job's ``link.per_step`` (its calls, its uplinks as seen) given each uplink's
    predicted bytes from the job's NCCL log, and the algorithm and protocol of each call;
    the metrics ``uplink_bytes_per_step_predicted`` (the busiest uplink's) and
    ``node_bytes_per_step_predicted``, or none, with ``not_predicted`` saying why."""
    calls = [Call.from_record(c) for c in per_step["calls"]]
    graph = read_graph(lines, world)
    try:
        per_call = placed(calls, graph, world)
    except NotModelled as error:
        per_step["not_predicted"] = f"NCCL: {error}"
        return {}
    per_step["nccl_choices"] = {c.op: "/".join(graph.choice(c.op, c.size)) for c in calls}
    predicted = uplink_bytes_of(per_call, world, nodes)
    return {
        "uplink_bytes_per_step_predicted": attach(per_step["uplinks"], predicted),
        "node_bytes_per_step_predicted": node_bytes_of(per_call, world, nodes),
    }
