"""Beyond this machine, on paper: a measured job's step time projected to N GPUs per link.

``python -m linkbench.project JOB_DIR --gpus 8,64,512`` reads the job's result.json: the
compute-only step time (steps under DDP's ``no_sync``), the bytes all-reduced per step, and
DDP's own backward-communication and overlap times; for a job traced with ``profile=trace``,
the synced steps' computing, rest and overlap from the trace instead (on a CPU the
communication takes cores from the computing beside it, which a no_sync step does not
see). For each named link it predicts

    comm(N)    = 2(N-1) * latency + 2(N-1)/N * bytes / bandwidth     (ring all-reduce)
    hidden(N)  = min(overlap_fraction * comm(N), backward compute time)
    step(N)    = compute + comm(N) - hidden(N)
    efficiency = compute / step(N)                                     (1 = linear scaling)

where overlap_fraction is the share of DDP's communication time it overlapped with the
backward pass in the measured job (0 when unknown). Every GPU's ring neighbour is assumed to
be reached over the named link at the named bandwidth: a flat ring, one link per GPU, no
contention, no hierarchical or tree algorithms, no NVLS; across nodes that means the network
sets the pace however fast NVLink is inside a node.

``--cluster NxR --inside JOB`` predicts instead an emulated cluster of N nodes of R ranks on
this host from the job (one rank a node, the link between nodes) and JOB (one node of
several ranks, the path inside a node): :mod:`linkbench.analysis.cluster`.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from linkbench.analysis import cluster
from linkbench.analysis.conditions import host_work
from linkbench.analysis.measured_link import MeasuredLink, messages_of
from linkbench.files import RESULT_FILE
from linkbench.result import JobResult, UnknownLayout, read_result


@dataclass(frozen=True)
class Link:
    name: str
    bandwidth_gb_s: float  # GB/s per direction per GPU, 1e9 bytes
    latency_us: float  # per ring step
    source: str


LINKS = (
    Link("nvlink4", 450.0, 2.0, "NVLink 4 (H100/H200 SXM): 18 links x 25 GB/s per direction"),
    Link("pcie4", 25.0, 5.0, "PCIe Gen4 x16: 32 GB/s theoretical, about 25 achievable"),
    Link("pcie5", 50.0, 5.0, "PCIe Gen5 x16: 63 GB/s theoretical, about 50-55 achievable"),
    Link("net100", 12.5, 10.0, "100 Gb/s network, one NIC per GPU"),
    Link("net400", 50.0, 10.0, "400 Gb/s network, one NIC per GPU"),
)


COMPUTE = {
    False: "compute-only step",
    True: "computing and the rest of a synced step (profile=trace)",
}
TRACE_PARTS = ("compute_ms", "overlapped_ms", "exposed_comm_ms", "other_ms")


class ProjectionError(ValueError):
    """The job's result.json lacks what the projection needs."""


def inputs_from_result(result: JobResult) -> dict[str, float]:
    """compute_ms, comm_bytes, overlap_fraction, backward_ms and traced (1.0 when compute and
    overlap come from the job's trace) from a training job: its trace, else the probe's
    figures, which a configuration's first run has (:func:`with_first_run`)."""
    metrics = result.get("metrics", {})
    trace = (result.get("trace") or {}).get("mean") or {}
    traced = all(isinstance(trace.get(k), float) for k in TRACE_PARTS)
    if (
        result.get("task", "train") != "train"
        or "grad_bytes" not in metrics
        or ("compute_step_ms" not in metrics and not traced)
    ):
        raise ProjectionError(
            "the job has neither the probe's compute_step_ms nor a trace: project a completed "
            "task=train job with task.no_sync_steps > 0 (the probe runs in a configuration's "
            "first run: a sweep's round 0), or one with profile=trace."
        )
    comm_bytes = float(metrics.get("comm_bytes_per_step", metrics["grad_bytes"]))
    if traced:
        # The synced steps' own computing (slower than a no_sync step's where communication
        # takes cores from it, as on a CPU), the rest of the step, and their overlap.
        comm = trace["overlapped_ms"] + trace["exposed_comm_ms"]
        compute = trace["compute_ms"] + trace["other_ms"]
        return {
            "compute_ms": compute,
            "comm_bytes": comm_bytes,
            "overlap_fraction": trace["overlapped_ms"] / comm if comm else 0.0,
            "backward_ms": metrics.get("ddp_backward_compute_ms", compute),
            "traced": 1.0,
        }
    comm_ms, overlap_ms = metrics.get("ddp_backward_comm_ms"), metrics.get("ddp_comm_overlap_ms")
    overlap = min(1.0, overlap_ms / comm_ms) if comm_ms and overlap_ms else 0.0
    return {
        "compute_ms": metrics["compute_step_ms"],
        "comm_bytes": comm_bytes,
        "overlap_fraction": overlap,
        "backward_ms": metrics.get("ddp_backward_compute_ms", metrics["compute_step_ms"]),
        "traced": 0.0,
    }


def with_first_run(result: JobResult, job_dir: Path) -> tuple[JobResult, str | None]:
    """A job of a sweep's later round, with the figures of its configuration's first run
    (round 0, beside it in the sweep) that its own run lacks (the probe's: it runs there
    only), and that job's name; the job as it is where it has them, or is no such job."""
    metrics = result.get("metrics") or {}
    if "compute_step_ms" in metrics or not result.get("round"):
        return result, None
    mine = {k: v for k, v in (result.get("settings") or {}).items() if k != "round"}
    for path in sorted(job_dir.parent.glob(f"*/{RESULT_FILE}")):
        other = read_result(path.parent) or {}
        theirs = {k: v for k, v in (other.get("settings") or {}).items() if k != "round"}
        if other.get("round") == 0 and other.get("status") == "completed" and theirs == mine:
            first = other.get("metrics") or {}
            merged = {**first, **metrics}
            return {**result, "metrics": merged}, path.parent.name
    return result, None


def ring_allreduce_ms(n: int, size_bytes: float, link: Link) -> float:
    if n < 2:
        return 0.0
    latency = 2 * (n - 1) * link.latency_us / 1e3
    return latency + 2 * (n - 1) / n * size_bytes / (link.bandwidth_gb_s * 1e9) * 1e3


def project(inputs: dict[str, float], n: int, link: Link) -> dict[str, float]:
    """The step on ``n`` GPUs over a named link (a datasheet line rate)."""
    return projected(inputs, n, ring_allreduce_ms(n, inputs["comm_bytes"], link))


def projected(inputs: dict[str, float], n: int, comm: float) -> dict[str, float]:
    """The step on ``n`` GPUs when its communication takes ``comm`` milliseconds."""
    hidden = min(inputs["overlap_fraction"] * comm, inputs["backward_ms"])
    step = inputs["compute_ms"] + comm - hidden
    return {"gpus": n, "comm_ms": comm, "step_ms": step, "efficiency": inputs["compute_ms"] / step}


def _cells(points: list[dict[str, float]]) -> str:
    return " ".join(f"{p['step_ms']:>13.2f} ({100 * p['efficiency']:>5.1f}%)" for p in points)


def table(
    inputs: dict[str, float],
    gpus: list[int],
    links: tuple[Link, ...],
    measured: list[dict[str, float]] | None = None,
) -> str:
    header = f"{'link':<8} {'GB/s':>6} {'lat us':>6} " + " ".join(
        f"{f'N={n}: ms/step (eff)':>22}" for n in gpus
    )
    rows = [header]
    if measured is not None:
        rows.append(f"{'measured':<8} {'curve':>6} {'':>6} " + _cells(measured))
    for link in links:
        cells = _cells([project(inputs, n, link) for n in gpus])
        rows.append(f"{link.name:<8} {link.bandwidth_gb_s:>6.1f} {link.latency_us:>6.1f} {cells}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m linkbench.project",
        description="Project a measured training job's step time to N GPUs on named links.",
    )
    parser.add_argument("job_dir", type=Path, help="a job's output directory (with result.json)")
    parser.add_argument("--gpus", default="8,64,512", help="comma-separated GPU counts")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--links", type=Path, default=None,
        help="a task=allreduce job whose measured bus bandwidth curve replaces line rates",
    )  # fmt: skip
    parser.add_argument(
        "--cluster", default=None,
        help="NODESxRANKS: predict an emulated cluster of this host from JOB_DIR (one rank a "
        "node) and --inside",
    )  # fmt: skip
    parser.add_argument(
        "--inside", type=Path, default=None,
        help="with --cluster: a job on one emulated node of several ranks (interconnect.nodes=1)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.cluster is not None or args.inside is not None:
        return _cluster(args)
    try:
        gpus = [int(g) for g in args.gpus.split(",")]
        if any(g < 1 for g in gpus):
            raise ValueError
    except ValueError:
        print(
            f"--gpus={args.gpus} must be positive integers, e.g. --gpus 8,64,512", file=sys.stderr
        )
        return 2
    result_file = args.job_dir / RESULT_FILE
    if not result_file.is_file():
        print(f"{result_file} does not exist: pass a job's output directory", file=sys.stderr)
        return 2
    try:
        result = read_result(args.job_dir)
    except UnknownLayout as error:
        print(str(error), file=sys.stderr)
        return 2
    if result is None:
        print(f"{result_file} is not a JSON object (cut short?): pass a finished job's "
              "output directory", file=sys.stderr)  # fmt: skip
        return 2
    result, first = with_first_run(result, args.job_dir)
    try:
        inputs = inputs_from_result(result)
    except ProjectionError as error:
        print(f"{result_file}: {error}", file=sys.stderr)
        return 2
    if first is not None:
        print(f"the probe's figures from {first}, this configuration's first run (the probe "
              "runs there only)", file=sys.stderr)  # fmt: skip
    measured = curve = None
    if args.links is not None:
        try:
            curve = MeasuredLink.from_result(read_result(args.links) or {}, str(args.links))
        except ValueError as error:  # UnknownLayout too
            print(str(error), file=sys.stderr)
            return 2
        messages = messages_of(result["metrics"])
        measured = [projected(inputs, n, curve.comm_ms(n, messages)) for n in gpus]
    if args.json:
        out = {
            "inputs": inputs,
            "links": {link.name: [project(inputs, n, link) for n in gpus] for link in LINKS},
        }
        if measured is not None:
            out["measured"] = {"source": str(args.links), "projection": measured}
        json.dump(out, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"{args.job_dir}: {result.get('model')} at batch {result.get('batch')} per GPU, "
        f"{result.get('precision')}, measured on {result.get('world_size')} x "
        f"{result.get('device_type')}\n"
        f"{COMPUTE[bool(inputs['traced'])]} {inputs['compute_ms']:.2f} ms, "
        f"{inputs['comm_bytes'] / 1e6:.1f} MB all-reduced per step, "
        f"{100 * inputs['overlap_fraction']:.0f}% of communication overlapped with computing "
        f"({'the trace' if inputs['traced'] else 'DDP'}'s measure; 0 when unknown)\n"
    )
    print(table(inputs, gpus, LINKS, measured))
    if curve is not None:
        shown = ", ".join(
            f"{m.op} {m.count:.0f} x {m.size / 1e6:.2f} MB at {curve.busbw_gb_s(m.op, m.size):.1f} "
            "GB/s busbw"
            for m in messages_of(result["metrics"])
        )
        print(
            f"\nmeasured: the bus bandwidth {args.links} measured on {curve.world_size} ranks, "
            f"interpolated at this job's message sizes ({shown}); the datasheet rows below "
            "assume line rates."
        )
    print("\nLinks (bandwidth per direction per GPU, latency per ring step):")
    for link in LINKS:
        print(f"  {link.name}: {link.source}")
    print(
        "\nAssumptions: ring all-reduce 2(N-1) x latency + 2(N-1)/N x bytes / bandwidth; a flat "
        "ring over one link per GPU; the measured overlap fraction, capped at the backward "
        "compute time; no contention, tree/NVLS algorithms or compression beyond the job's "
        "comm hook. Efficiency = compute-only step / projected step."
    )
    return 0


def _result(job: Path) -> JobResult:
    try:
        found = read_result(job)
    except UnknownLayout as error:
        raise cluster.ClusterError(str(error).rstrip(".")) from None
    if found is None:
        raise cluster.ClusterError(
            f"{job / RESULT_FILE} is missing or not JSON: pass a finished job's directory"
        )
    return with_first_run(found, job)[0]


def _cluster(args: argparse.Namespace) -> int:
    """``--cluster NxR --inside JOB``: one sentence for what is missing or wrong."""
    try:
        if args.cluster is None or args.inside is None:
            raise cluster.ClusterError(
                "--cluster and --inside go together: --cluster 2x2 --inside ONE_NODE_JOB_DIR"
            )
        nodes, ranks = cluster.parse_cluster(args.cluster)
        between_job, inside_job = _result(args.job_dir), _result(args.inside)
        between = cluster.measured(between_job, str(args.job_dir))
        inside_gb_s = cluster.inside(inside_job, str(args.inside))
        prediction = cluster.predict(between, inside_gb_s, nodes, ranks)
        work = {
            "between-nodes job": host_work([between_job]),
            "inside-a-node job": host_work([inside_job]),
        }
    except cluster.ClusterError as error:
        print(str(error), file=sys.stderr)
        return 2
    caveat = cluster.work_caveat(work)
    if args.json:
        json.dump({**prediction, "inputs_load": caveat}, sys.stdout, indent=2)
        print()
    else:
        print(cluster.report(prediction, between, inside_gb_s), caveat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
