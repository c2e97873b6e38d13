"""Training on emulated links (``interconnect=emulated``) against what the bytes predict.

A link whose rate was set is a known answer. For each configuration of a sweep that trained
over one, the step time is predicted from the bytes and what was measured apart from them:

    comm_ms      = bytes through the busiest uplink per step / the link's measured bus bandwidth
                 + bytes the busiest rank sends inside its node, in calls that cross no
                   uplink / the node path's measured bus bandwidth
    predicted_ms = compute_ms + comm_ms - overlapped_ms + other_ms

where the uplink's bytes come from the strategy's calls and gloo's algorithms
(:mod:`linkbench.link.crossing`; without them, a ring all-reduce's 2(n-1)/n of the gradient
bytes), a call that crosses an uplink goes at the uplink's pace (the slower path), the bus
bandwidths are the link probe's and the node probe's (every run of an emulated arm times an
all_reduce on its link, and with several ranks a node one inside each node, before its task,
:mod:`linkbench.worker.emulated`), and compute, overlap and the
rest come from the trace of the synced steps (``profile=trace``): on a CPU the communication
takes cores from the computation beside it, so the probe's no_sync step (used without a
trace, with DDP's overlap measure) computes faster than a synced one. The summary sets the
prediction beside the measured step time; the plot draws the measured points over the curve
the set rates predict (their payload rate, :func:`linkbench.link.emulated.payload_gb_s`, in
place of the measured bandwidth).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from linkbench.analysis.conditions import host_work
from linkbench.analysis.stats import Mean
from linkbench.analysis.sweep import Configuration
from linkbench.link.bandwidth import bus_factor
from linkbench.link.emulated import payload_gb_s

RATE_KEY = "interconnect.rate_gbit_s"


def comm_ms(
    uplink_bytes: float,
    busbw_gb_s: float,
    node_bytes: float = 0.0,
    node_busbw_gb_s: float | None = None,
) -> float:
    """A step's communication on an emulated cluster: the busiest uplink's bytes at the link's
    bus bandwidth, plus the bytes that stay inside a node (the busiest rank's) at the node
    path's. A call that crosses an uplink goes at the uplink's pace, the slower path."""
    inside = node_bytes / node_busbw_gb_s / 1e6 if node_bytes and node_busbw_gb_s else 0.0
    return uplink_bytes / busbw_gb_s / 1e6 + inside


@dataclass(frozen=True)
class LinkRow:
    """One trained configuration on an emulated link, measured and predicted."""

    label: str
    series: str
    """The label without the rate: the configurations one curve joins."""
    rate_gbit_s: float
    delay_ms: float
    busbw_gb_s: float
    """The link probe's bus bandwidth (mean over runs)."""
    step_ms: Mean
    compute_ms: float
    """Computing time of a synced step (the overlapped part included)."""
    overlapped_ms: float
    """Communication that ran while computing."""
    other_ms: float
    """Neither computing nor communicating (the trace's; 0 without one)."""
    source: str
    comm_bytes: float
    """Bytes all-reduced per step."""
    world_size: int
    strategy: str = ""
    nodes: int = 0
    """Nodes of the emulated cluster (0: not recorded, one per rank)."""
    uplink_predicted: float | None = None
    """Bytes per step the busiest node uplink must carry one way, from the strategy's calls
    and the backend's algorithms (:mod:`linkbench.link.crossing`)."""
    uplink_seen: float | None = None
    """What that uplink's interface counters saw per timed step."""
    node_bytes: float = 0.0
    """Bytes per step the busiest rank sends inside its node in calls that cross no uplink."""
    node_busbw_gb_s: float | None = None
    """The node probe's bus bandwidth (the path inside a node; on one node, the link
    probe's, which ran inside it)."""
    moved: str | None = None
    """How the inputs the prediction rests on moved across the runs (:func:`inputs_moved`),
    where they moved beyond what its 15 % can absorb."""
    spans: Spans | None = None
    """The lowest and highest reading of each input across runs (None: one run)."""
    rate_shown: str = ""
    """The rate as the table gives it, with any uplink set apart (:func:`rate_text`)."""

    def link_bytes(self) -> float:
        """Bytes per step through the busiest uplink, one way: predicted from the strategy's
        calls where recorded, else the ring all-reduce's 2(n-1)/n of the gradient bytes."""
        if self.uplink_predicted is not None:
            return self.uplink_predicted
        return self.comm_bytes * bus_factor("all_reduce", self.world_size)

    def comm_ms(self, busbw_gb_s: float | None = None) -> float:
        """The uplink's bytes' time per step at this bus bandwidth (default: the measured;
        a ring all-reduce's busbw is its bytes through each link over its time), plus the
        time of the calls that stay inside the nodes at the node path's."""
        busbw = busbw_gb_s or self.busbw_gb_s
        return comm_ms(self.link_bytes(), busbw, self.node_bytes, self.node_busbw_gb_s)

    def node_ms(self) -> float:
        """The calls that stay inside the nodes: their bytes at the node path's pace."""
        return comm_ms(0.0, self.busbw_gb_s, self.node_bytes, self.node_busbw_gb_s)

    def exposed_ms(self) -> float:
        """The communication the bytes predict the step waits for: its time less what
        overlapped the computing (what the probe and the trace each measure)."""
        return self.comm_ms() - self.overlapped_ms

    def predicted_ms(self, busbw_gb_s: float | None = None) -> float:
        """compute + comm - overlapped + other."""
        return self.compute_ms + self.comm_ms(busbw_gb_s) - self.overlapped_ms + self.other_ms

    @property
    def error(self) -> float:
        """Measured over predicted, less 1."""
        return self.step_ms.mean / self.predicted_ms() - 1

    def span_ms(self) -> tuple[float, float]:
        """The step time the inputs predict at their most favourable readings across runs
        (fastest probes, least computing) and at their least: the prediction's interval
        from its inputs' spread. A point (twice) where one run was measured."""
        if self.spans is None:
            return self.predicted_ms(), self.predicted_ms()
        (link_low, link_high), (node_low, node_high), (compute_low, compute_high) = self.spans
        fastest = replace(self, busbw_gb_s=link_high, node_busbw_gb_s=node_high,
                          compute_ms=compute_low)  # fmt: skip
        slowest = replace(self, busbw_gb_s=link_low, node_busbw_gb_s=node_low,
                          compute_ms=compute_high)  # fmt: skip
        return fastest.predicted_ms(), slowest.predicted_ms()

    def error_span(self) -> tuple[float, float] | None:
        """Measured over the ends of :meth:`span_ms`, less 1, where the figure is stated as
        that interval (its inputs moved, or span beyond HOLDS); None where it is a point."""
        if not (self.moved or self.beyond):
            return None
        low, high = self.span_ms()
        return self.step_ms.mean / high - 1, self.step_ms.mean / low - 1

    @property
    def beyond(self) -> bool:
        """Whether the inputs moved further than the figure's 15 % absorbs: the prediction
        from their extreme readings lies more than HOLDS from the one from their means."""
        low, high = self.span_ms()
        point = self.predicted_ms()
        return high > point * (1 + HOLDS) or low < point * (1 - HOLDS)


HOLDS = 0.15
"""How close a prediction comes to the measured step time on a quiet host (the known
answers: tests/link/test_known_answers.py, benchmarks/RESULTS.md)."""

Spans = tuple[tuple[float, float], tuple[float | None, float | None], tuple[float, float]]
"""(link probe GB/s, node probe GB/s, computing ms of a synced step): each (lowest, highest)
across runs."""


def rate_text(link: dict[str, Any], unit: str = "") -> str:
    """The link's rate in Gbit/s as a table (or, with ``unit``, a sentence) gives it, with the
    uplinks set apart from it: ``1 (node 2 at 0.25)``, ``1 Gbit/s (node 2 at 0.25)``."""
    rate = float(link["rate_gbit_s"])
    apart = [
        f"node {node} at {float(own):g}"
        for node, own in (link.get("uplink_rates_gbit_s") or {}).items()
        if float(own) != rate
    ]
    return f"{rate:g}{unit}" + (f" ({', '.join(apart)})" if apart else "")


def link_settings(config: Configuration) -> dict[str, Any] | None:
    """The emulated link a configuration ran on (None: not an emulated arm)."""
    link = config.first("link")
    return link if isinstance(link, dict) and "rate_gbit_s" in link else None


def _computing(config: Configuration) -> list[float]:
    """Each run's computing time of a synced step, as :func:`_step_parts` takes it."""
    traced = [j["trace"]["mean"] for j in config.jobs if j.get("trace")]
    found = [t["compute_only_ms"] + t["overlapped_ms"] for t in traced if "overlapped_ms" in t]
    return found or config.values("compute_step_ms")


def _spans(config: Configuration) -> Spans | None:
    """Each input's lowest and highest reading across runs (None: fewer than two runs)."""
    link, computing = config.values("link_busbw_gb_s"), _computing(config)
    if len(link) < 2 or not computing:
        return None
    node = config.values(_node_key(link_settings(config) or {}))
    return (
        (min(link), max(link)),
        (min(node), max(node)) if node else (None, None),
        (min(computing), max(computing)),
    )


def _step_parts(config: Configuration) -> tuple[float, float, float, str] | None:
    """(computing, overlapped, other) milliseconds of a synced step and where they came
    from: the trace (what the synced steps really computed, slowed by the communication
    beside them on a CPU), else the probe's no_sync step and DDP's overlap measure."""
    trace = config.trace_means()
    if trace is not None and "overlapped_ms" in trace:
        overlapped = trace["overlapped_ms"]
        return trace["compute_only_ms"] + overlapped, overlapped, trace["other_ms"], "trace"
    compute, ddp = config.mean("compute_step_ms"), config.mean("ddp_comm_overlap_ms")
    if compute is None or ddp is None:
        return None
    return compute.mean, ddp.mean, 0.0, "no_sync probe and DDP"


def rate_warnings(configs: list[Configuration]) -> list[str]:
    """The link probe's warnings (a link slower than its set rate), once per configuration."""
    found = []
    for config in configs:
        said = {str((j.get("link") or {}).get("rate_warning") or "") for j in config.jobs} - {""}
        found += [f"- {config.label()}: {warning}" for warning in sorted(said)]
    return found


def slow_uplink_lines(configs: list[Configuration]) -> list[str]:
    """The uplinks each configuration's runs named slow by measurement (the sends between
    each pair of nodes, :mod:`linkbench.link.fabric`): per node, in how many of its runs and
    at what measured rate (the median over those runs), beside the others'."""
    found = []
    for config in configs:
        links = [j.get("link") or {} for j in config.jobs]
        measured = [link for link in links if "slow_uplinks" in link]
        named: dict[int, list[dict[str, Any]]] = {}
        for link in measured:
            for slow in link["slow_uplinks"]:
                named.setdefault(int(slow["node"]), []).append(slow)
        for node, seen in sorted(named.items()):
            rate = statistics.median(s["gb_s"] for s in seen)
            others = statistics.median(s["others_gb_s"] for s in seen)
            found.append(
                f"- {config.label()}: node {node}'s uplink read slow in {len(seen)} of "
                f"{len(measured)} run(s), at {rate:.4g} GB/s against the other uplinks' "
                f"{others:.4g} GB/s (medians over those runs)"
            )
    return found


def link_rows(configs: list[Configuration]) -> list[LinkRow]:
    """Every trained configuration on an emulated link whose inputs were measured."""
    rows = []
    for config in configs:
        link, step = link_settings(config), config.mean("step_time_ms")
        busbw, parts = config.mean("link_busbw_gb_s"), _step_parts(config)
        uplink = _mean(config, "uplink_bytes_per_step_predicted")
        # the bytes the strategy moves: the no_sync probe's count, or the uplinks' prediction
        comm_bytes = _mean(config, "comm_bytes_per_step") or uplink
        if link is None or step is None or busbw is None or comm_bytes is None or parts is None:
            continue
        rows.append(
            LinkRow(
                label=config.label(),
                series=config.label(skip=RATE_KEY),
                rate_gbit_s=float(link["rate_gbit_s"]),
                rate_shown=rate_text(link),
                delay_ms=float(link.get("delay_ms", 0.0)),
                busbw_gb_s=busbw.mean,
                step_ms=step,
                compute_ms=parts[0],
                overlapped_ms=parts[1],
                other_ms=parts[2],
                source=parts[3],
                comm_bytes=comm_bytes,
                world_size=int(config.first("world_size") or 2),
                strategy=str(config.first("strategy") or ""),
                nodes=int(link.get("nodes") or 0),
                uplink_predicted=uplink,
                uplink_seen=_mean(config, "uplink_bytes_per_step"),
                node_bytes=_mean(config, "node_bytes_per_step_predicted") or 0.0,
                node_busbw_gb_s=_mean(config, _node_key(link)),
                moved=inputs_moved(config),
                spans=_spans(config),
            )
        )
    return rows


PROBE_SPREAD = 0.20
"""A link or node probe (or the computing) whose runs read further apart than this share of
their mean: the prediction, which takes their mean, then rests on a pace the runs did not
share."""


def inputs_moved(config: Configuration) -> str | None:
    """What moved under a configuration's prediction, in words, or None: its probes' and its
    computing's readings across runs (further apart than PROBE_SPREAD of their mean) and the
    other work on the host during the runs (:class:`linkbench.analysis.conditions.HostWork`:
    the ranks' computing and the paths inside a node then wait for it)."""
    said = []
    for what, values, unit in (
        ("link probe", config.values("link_busbw_gb_s"), "GB/s"),
        ("node probe", config.values("node_busbw_gb_s"), "GB/s"),
        ("computing of a synced step", _computing(config), "ms"),
    ):
        if len(values) > 1 and max(values) - min(values) > PROBE_SPREAD * (
            sum(values) / len(values)
        ):
            said.append(f"the {what} read {min(values):.3g}-{max(values):.3g} {unit} across runs")
    work = host_work(config.jobs)
    if work is not None and work.busy:
        said.append(str(work))
    return "; ".join(said) or None


def moved_notes(rows: list[LinkRow]) -> list[str]:
    """One line per configuration whose prediction's inputs moved (:func:`inputs_moved`, or
    a span beyond HOLDS): the interval its inputs' readings give, and that its figure is not
    held to the 15 % the known answers hold on a quiet host."""
    out = []
    for r in rows:
        if (errors := r.error_span()) is None:
            continue
        low, high = r.span_ms()
        out.append(
            f"- {r.label}: measured / predicted {r.error:+.1%} rests on inputs that moved "
            f"({r.moved or 'their readings across runs'}); from their lowest and highest "
            f"readings the step is predicted at {low:.1f}-{high:.1f} ms, measured / predicted "
            f"{errors[0]:+.0%} to {errors[1]:+.0%}"
            + (f", wider than the {HOLDS:.0%} a prediction holds" if r.beyond else "")
            + ". On a busy host the probes, the computing and the paths inside a node move "
            "with the load, so this figure is not held to the 15 % a quiet host gives (run it "
            "alone)"
        )
    return out


def _node_key(link: dict[str, Any]) -> str:
    """The metric that measured the node path: the node probe's; on one node, the link
    probe's, which ran inside it."""
    return "link_busbw_gb_s" if int(link.get("nodes") or 0) == 1 else "node_busbw_gb_s"


def _mean(config: Configuration, key: str) -> float | None:
    found = config.mean(key)
    return found.mean if found is not None else None


def with_bytes_of(base: LinkRow, arm: LinkRow) -> float:
    """The step ``base``'s job would take sending ``arm``'s bytes (through the busiest uplink
    and inside the nodes) at ``base``'s measured bus bandwidths: what compression's fewer
    bytes alone would buy, from the uncompressed run."""
    moved = replace(base, uplink_predicted=arm.link_bytes(), node_bytes=arm.node_bytes)
    return base.step_ms.mean - base.comm_ms() + moved.comm_ms()


def predicted_at_rate(row: LinkRow, rate_gbit_s: float) -> float:
    """The step time ``row``'s job would take on a link of another rate, carrying that rate's
    payload (the same compute, bytes and overlap): the curve the plot draws."""
    return row.predicted_ms(payload_gb_s(rate_gbit_s))


NOTE = (
    "Each configuration's step time beside what its link predicts: the computing time of a "
    "synced step, plus the bytes the busiest node uplink carries per step one way (predicted "
    "from the strategy's calls and gloo's algorithms, beside what its counters saw) over the "
    "bus bandwidth the run measured on its link, plus the bytes of the calls that stay inside "
    "a node (the busiest rank's) over the bus bandwidth measured inside the nodes, less the "
    "communication that overlapped the "
    "computing, plus the rest (from the trace with profile=trace; else the no_sync probe's "
    "step and DDP's overlap, no rest, DDP only). The rate is the one set; at MTU 1500 a link "
    "carries 95.6 % of it as data (the headers)."
)


def _predicted(r: LinkRow) -> str:
    """The predicted step and measured / predicted: points, or with the interval the inputs'
    readings give where they moved."""
    if (errors := r.error_span()) is None:
        return f"{r.predicted_ms():.1f} | {r.error:+.1%}"
    low, high = r.span_ms()
    return (
        f"{r.predicted_ms():.1f} [{low:.1f}, {high:.1f}] | {r.error:+.1%} "
        f"[{errors[0]:+.0%}, {errors[1]:+.0%}] (inputs moved)"
    )


def table(rows: list[LinkRow]) -> list[str]:
    """The summary's section: one line per configuration."""
    if not rows:
        return []
    out = [
        "| configuration | strategy | nodes x ranks | rate Gbit/s | uplink MB/step predicted "
        "| seen | link busbw GB/s | inside nodes MB/step | node busbw GB/s "
        "| step ms [95% interval] | compute ms | comm ms "
        "| overlapped ms | other ms | predicted ms | measured / predicted |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        s = r.step_ms
        step = f"{s.mean:.1f} [{s.low:.1f}, {s.high:.1f}]" if s.has_interval else f"{s.mean:.1f}"
        nodes = r.nodes or r.world_size
        seen = f"{r.uplink_seen / 1e6:.3f}" if r.uplink_seen is not None else ""
        node_bw = f"{r.node_busbw_gb_s:.3f}" if r.node_busbw_gb_s else ""
        out.append(
            f"| {r.label} | {r.strategy} | {nodes} x {r.world_size // nodes} | "
            f"{r.rate_shown or f'{r.rate_gbit_s:g}'} | {r.link_bytes() / 1e6:.3f} | {seen} | "
            f"{r.busbw_gb_s:.4f} | "
            f"{r.node_bytes / 1e6:.3f} | {node_bw} | {step} | {r.compute_ms:.1f} | "
            f"{r.comm_ms():.1f} | {r.overlapped_ms:.1f} | "
            f"{r.other_ms:.1f} ({r.source}) | {_predicted(r)} |"
        )
    return out
