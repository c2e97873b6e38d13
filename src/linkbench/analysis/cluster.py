"""An emulated cluster the box did not run, predicted from two it did: its two link classes.

``python -m linkbench.project BETWEEN_JOB --cluster 2x2 --inside INSIDE_JOB`` takes

- BETWEEN_JOB: a ``task=train`` job on an emulated link with one rank a node
  (``interconnect.nodes`` = the ranks, 2 nodes x 1 rank say): the link between nodes (its
  probe's bus bandwidth), the strategy's calls per step, and the step's computing, overlap
  and rest (from its trace with ``profile=trace``, else its no_sync probe and DDP's overlap);
- INSIDE_JOB: a job on one emulated node of several ranks (``interconnect.nodes=1``, 1 node
  x 2 ranks): the path inside a node (its probe ran over the node's loopback),

and predicts the step on N nodes of R ranks (:func:`predict`):

    calls        = the measured job's calls, each over the N x R ranks
    comm_ms      = bytes through the busiest uplink / the between-nodes bus bandwidth
                   + bytes the busiest rank sends in calls that stay inside a node
                     / the inside bus bandwidth      (the summary's rule: emulated.comm_ms)
    compute_ms   = the measured computing and rest x the cores' share (below)
    hidden_ms    = min(the measured overlap fraction x comm_ms, compute_ms)
    step_ms      = compute_ms + comm_ms - hidden_ms

The bytes come from the backend's algorithms (:mod:`linkbench.link.crossing`, gloo). The
ranks of an emulated cluster share the host's cores: each rank runs max(1, cores // ranks)
threads, and runs on them while the ranks' threads fit the cores, on its share of the cores
once they do not: a rank's computing time goes with max(1 / threads, ranks / cores)
(``core_share``), in the ratio of the topology's to the measured job's. A real cluster's
ranks each have their own device, where that ratio is 1. DDP's and FSDP's calls span the
world; HSDP's are placed on its mesh, one replica a node (:func:`placed`). ZeRO broadcasts
one share per rank: it is measured, not projected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from linkbench.analysis.conditions import HostWork
from linkbench.analysis.emulated import comm_ms
from linkbench.link.crossing import Call, node_bytes, uplink_bytes
from linkbench.result import JobResult

PROJECTED_STRATEGIES = ("ddp", "fsdp", "hsdp")


class ClusterError(ValueError):
    """A job that cannot stand for one of the two link classes."""


@dataclass(frozen=True)
class Measured:
    """What the job between nodes (one rank a node) gives the projection."""

    world: int
    busbw_gb_s: float
    cpus: int
    strategy: str
    calls: tuple[Call, ...]
    compute_ms: float
    """Computing and the rest of a synced step (the overlapped part included)."""
    overlap_fraction: float
    """The share of the step's communication that ran while computing."""


def parse_cluster(text: str) -> tuple[int, int]:
    """``NxR`` (N nodes of R ranks) as (N, R)."""
    nodes, _, ranks = text.lower().partition("x")
    try:
        found = int(nodes), int(ranks)
    except ValueError:
        found = (0, 0)
    if min(found) < 1:
        raise ClusterError(f"--cluster={text} must be NODESxRANKS, e.g. --cluster 2x2")
    return found


def _threads(cpus: int, world: int) -> int:
    """Threads a rank runs on this host (as the worker sets them)."""
    return max(1, cpus // world)


def core_share(cpus: int, world: int) -> float:
    """A rank's computing time on this host, relative to that work on one core: it runs on
    its threads while the ranks' threads fit the cores, on its share of the cores once they
    do not (ranks x threads > cores)."""
    return max(1 / _threads(cpus, world), world / cpus)


def _link(result: JobResult, source: str) -> dict[str, Any]:
    link = result.get("link") or {}
    if result.get("task", "train") != "train" or "measured_busbw_gb_s" not in link:
        raise ClusterError(
            f"{source}: not a task=train job on an emulated link (interconnect=emulated): "
            "project from jobs that trained over one."
        )
    return link


def inside(result: JobResult, source: str) -> float:
    """The bus bandwidth inside a node: the link probe of a job on one node of several
    ranks (it ran over the node's loopback)."""
    link, world = _link(result, source), int(result.get("world_size") or 0)
    if int(link.get("nodes") or world) != 1 or world < 2:
        raise ClusterError(
            f"{source}: the inside-a-node job ran {link.get('nodes')} node(s) of {world} "
            "ranks: run it with interconnect.nodes=1 and devices=2 or more."
        )
    return float(link["measured_busbw_gb_s"])


def measured(result: JobResult, source: str) -> Measured:
    """What the job between nodes (one rank a node) gives, or a sentence saying why not."""
    link, metrics = _link(result, source), result.get("metrics") or {}
    world = int(result.get("world_size") or 0)
    nodes = int(link.get("nodes") or world)
    if nodes < 2 or nodes != world:
        raise ClusterError(
            f"{source}: the between-nodes job ran {nodes} node(s) of {world} ranks: run it "
            "with one rank a node on two or more (interconnect.nodes equal to devices)."
        )
    strategy = str(result.get("strategy") or "")
    calls = tuple(Call.from_record(c) for c in (link.get("per_step") or {}).get("calls", []))
    if strategy not in PROJECTED_STRATEGIES or not calls:
        raise ClusterError(
            f"{source}: strategy {strategy or 'unknown'}: only "
            f"{', '.join(PROJECTED_STRATEGIES)} are projected (their calls placed anew over "
            "the ranks, on gloo); measure the others on the cluster itself."
        )
    trace = (result.get("trace") or {}).get("mean") or {}
    if "overlapped_ms" in trace:
        comm = trace["overlapped_ms"] + trace["exposed_comm_ms"]
        compute = trace["compute_only_ms"] + trace["overlapped_ms"] + trace["other_ms"]
        overlap = trace["overlapped_ms"] / comm if comm else 0.0
    elif "compute_step_ms" in metrics:
        compute = metrics["compute_step_ms"]
        ddp_comm = metrics.get("ddp_backward_comm_ms")
        ddp_overlap = metrics.get("ddp_comm_overlap_ms")
        overlap = min(1.0, ddp_overlap / ddp_comm) if ddp_comm and ddp_overlap else 0.0
    else:
        raise ClusterError(
            f"{source}: neither a trace nor a compute-only step: run it with profile=trace "
            "(or task.no_sync_steps > 0: the probe runs in a configuration's first run)."
        )
    start = (result.get("conditions") or [{}])[0].get("start") or {}
    cpus = int(start.get("cpus_usable") or start.get("cpus") or 0)
    return Measured(
        world=world,
        busbw_gb_s=float(link["measured_busbw_gb_s"]),
        cpus=cpus or world,
        strategy=strategy,
        calls=calls,
        compute_ms=float(compute),
        overlap_fraction=float(overlap),
    )


def placed(between: Measured, nodes: int, ranks: int) -> list[Call]:
    """The measured job's calls over ``nodes`` x ``ranks`` ranks. DDP's and FSDP's span the
    world. HSDP's (one replica a node) gather and reduce-scatter inside each node (a row of
    its mesh) the sizes it did, and all-reduce each rank's gradient shard, 1/R of the
    reduce-scattered bytes, across the nodes (a column): what ``HSDPStrategy`` calls."""
    world = nodes * ranks
    if between.strategy != "hsdp":
        return [Call(c.op, c.size, c.src) for c in between.calls if c.src < world]
    sizes = {c.op: c.size for c in between.calls}
    rows = [tuple(range(n * ranks, (n + 1) * ranks)) for n in range(nodes)]
    columns = [tuple(range(r, world, ranks)) for r in range(ranks)]
    calls = [Call(op, sizes[op], group=row) for row in rows
             for op in ("all_gather", "reduce_scatter")]  # fmt: skip
    return calls + [Call("all_reduce", sizes["reduce_scatter"] / ranks, group=c) for c in columns]


def predict(between: Measured, inside_gb_s: float, nodes: int, ranks: int) -> dict[str, float]:
    """The step on ``nodes`` nodes of ``ranks`` ranks of this host (module docstring), from
    the job between nodes and the bus bandwidth inside one."""
    world = nodes * ranks
    if between.strategy == "hsdp" and nodes < 2:
        raise ClusterError(
            f"--cluster {nodes}x{ranks}: hsdp replicates across nodes and needs 2 or more; "
            "project a topology of several nodes."
        )
    calls = placed(between, nodes, ranks)
    uplinks = uplink_bytes(calls, world, nodes)
    uplink = max((max(u["tx_bytes"], u["rx_bytes"]) for u in uplinks), default=0.0)
    inside_bytes = node_bytes(calls, world, nodes)
    comm = comm_ms(uplink, between.busbw_gb_s, inside_bytes, inside_gb_s)
    share = core_share(between.cpus, world) / core_share(between.cpus, between.world)
    compute = between.compute_ms * share
    hidden = min(between.overlap_fraction * comm, compute)
    return {
        "nodes": nodes,
        "ranks_per_node": ranks,
        "uplink_bytes": uplink,
        "inside_bytes": inside_bytes,
        "comm_ms": comm,
        "compute_ms": compute,
        "core_share": share,
        "hidden_ms": hidden,
        "step_ms": compute + comm - hidden,
    }


def work_caveat(work: dict[str, HostWork | None]) -> str:
    """What the projection's inputs were measured beside, one sentence: the other work on the
    host in each input job (:class:`HostWork`); where the host was busy, that the figure is
    not held to 15 % (its computing and the path inside a node slowed with the other work,
    by an amount the projection cannot know)."""
    seen = {name: w for name, w in work.items() if w is not None}
    if not seen:
        return "The input jobs recorded no host load: how busy the host was is not known."
    said = "; ".join(f"in the {name}, {w}" for name, w in seen.items())
    busy = [name for name, w in seen.items() if w.busy]
    if busy:
        return (
            f"Inputs measured on a busy host ({said}): in the {' and '.join(busy)}, so this "
            "prediction is not held to 15 % (its computing and the path inside a node slowed "
            "by what else ran); measure them on a quiet host."
        )
    return f"Inputs measured on a quiet host ({said})."


def report(prediction: dict[str, float], between: Measured, inside_gb_s: float) -> str:
    """The projection in words, with its inputs."""
    p = prediction
    return (
        f"{p['nodes']} nodes x {p['ranks_per_node']} ranks, {between.strategy}: predicted "
        f"{p['step_ms']:.1f} ms/step = computing {p['compute_ms']:.1f} ms (the measured "
        f"{between.compute_ms:.1f} x {p['core_share']:.2f}, the host's cores shared by more "
        f"ranks) + communication {p['comm_ms']:.1f} ms ({p['uplink_bytes'] / 1e6:.2f} MB through "
        f"the busiest uplink at {between.busbw_gb_s:.4f} GB/s measured between nodes, "
        f"{p['inside_bytes'] / 1e6:.2f} MB inside a node at {inside_gb_s:.4f} GB/s "
        f"measured inside one) - {p['hidden_ms']:.1f} ms hidden under computing "
        f"({100 * between.overlap_fraction:.0f}% of it, as measured)."
    )
