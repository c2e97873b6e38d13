"""The summary's lines in words: one per comparison (its ratio, interval and verdict, and
why it stopped where adaptive rounds stopped it), one per configuration that could not be
judged, and one per job that did not complete."""

from __future__ import annotations

import math
from typing import Any

from linkbench.analysis.compare import ACCURACY_MARGIN, WINNERS, Comparison
from linkbench.analysis.emulated import RATE_KEY, link_settings, rate_text
from linkbench.analysis.sequential import FUTILE_BELOW
from linkbench.analysis.stats import MIN_INTERVAL_RUNS, Interval, Mean
from linkbench.analysis.sweep import Configuration
from linkbench.result import JobResult


def span(interval: Interval) -> str:
    return f"{interval.estimate:.3f}x [{interval.low:.3f}, {interval.high:.3f}]"


def mean_text(mean: Mean | None, unit: str) -> str:
    if mean is None:
        return "no completed run"
    if not mean.has_interval:
        runs = "1 run" if mean.runs == 1 else f"{mean.runs} runs"
        return (
            f"{mean.mean:,.1f} {unit} ({runs}: too few for an interval; use repeats="
            f"{MIN_INTERVAL_RUNS} or more)"
        )
    return f"{mean.mean:,.1f} [{mean.low:,.1f}, {mean.high:,.1f}] {unit} ({mean.runs} runs)"


def _futility_stop(c: Comparison, record: dict[str, Any]) -> tuple[int, float, float] | None:
    """(rounds paired, chance to decide, margin an equal verdict would need) as the futility
    rule had them when it last stopped ``c`` (rounds.json), or None where it never did. A
    sweep written before rounds.json kept the first two: the comparison's own now."""
    stops = [r for r in record.get("rounds") or [] if c.name in (r.get("futile") or {})]
    if not stops:
        return None
    last = stops[-1]
    pairs = (last.get("futile_pairs") or {}).get(c.name, c.pairs)
    needed = (last.get("futile_margin_needed") or {}).get(c.name)
    return (
        int(pairs),
        float(last["futile"][c.name]),
        float(c.equal_margin_needed() or 0.0 if needed is None else needed),
    )


def _rests_on_shared_cores(c: Comparison) -> str | None:
    """Where a verdict rests on a resource the host shares: on an emulated cluster of CPU
    ranks, the two sides send different bytes inside a node (HSDP's gathers against DDP's
    none), a path the ranks of a node run on the same cores they compute on, so the order
    can change with what else the host runs."""
    sides = [(link_settings(x), x) for x in (c.arm, c.base)]
    if any(link is None or int(link.get("ranks_per_node") or 1) < 2 for link, _ in sides):
        return None
    if any(x.first("device_type") != "cpu" for _, x in sides):
        return None
    inside = [x.mean("node_bytes_per_step_predicted") for _, x in sides]
    low, high = sorted(m.mean if m is not None else 0.0 for m in inside)
    if high <= 0 or low >= 0.9 * high:
        return None
    return (
        "the two send different bytes inside a node, a path that on this CPU host shares "
        "the cores with computing: this order can change with the host's load"
    )


def _seeds_are_runs(config: Configuration) -> bool:
    """Whether a configuration's runs are the seeds of a sweep over seeds, not rounds."""
    runs = config.runs()
    return all(r.round is None for r in runs) and len({r.seed for r in runs}) == len(runs) > 1


def verdict_line(
    c: Comparison, rounds: dict[str, Any] | None = None, inert: str | None = None
) -> str:
    """One sentence per comparison: estimate, interval, runs, verdict; an adaptive sweep's
    ``rounds`` record says why an undecided one stopped; ``inert``, why the axis cannot act
    on the jobs (:mod:`linkbench.analysis.inert`): the verdict is then an A/A check's."""
    where = f"at {c.where}: " if c.where else ""
    link = link_settings(c.arm)
    if link is not None and c.axis != RATE_KEY and f"{RATE_KEY}=" not in where:
        where = f"{where[:-2]} " if where else ""
        where += f"on an emulated link of {rate_text(link, ' Gbit/s')}: "
    runs = f"{c.ratio.runs[0]} vs {c.ratio.runs[1]} runs"
    bounded = math.isfinite(c.ratio.low + c.ratio.high)
    sequential = c.ratio.method == "sequential"
    if not c.ratio.has_interval or not (bounded or sequential):
        return (
            f"- {where}{c.axis}={c.arm_value} vs {c.baseline}: {c.ratio.estimate:.3f}x "
            f"({c.unit}), {runs}: **inconclusive** (too few runs for an interval; use "
            f"repeats={MIN_INTERVAL_RUNS} or more)" + _lost(c)
        )
    shown = span(c.ratio)
    if not bounded:  # an adaptive design's interval before its first look
        first = c.design.min_rounds if c.design else "its first look"
        shown = f"{c.ratio.estimate:.3f}x [no bounds before round {first}, the design's first look]"
    line = (
        f"- {where}{c.axis}={c.arm_value} vs {c.baseline}: {shown} ({c.unit}, "
        f"{runs}, {c.ratio.method}): **{c.verdict}**"
    )
    if inert:
        line += f" (an A/A check of the harness: {inert})"
    if c.verdict == "equal":
        line += f" (within ±{c.margin:.0%})"
    line += _accuracy(c)
    record = rounds or {}
    stop = _futility_stop(c, record)
    if c.verdict == "inconclusive" and stop is not None:
        pairs, chance, needed = stop
        line += (
            f" (stopped after {pairs} rounds as beyond deciding: from those rounds the rule "
            f"estimated the chance that the rounds left, up to "
            f"{c.design.max_rounds if c.design else ''}, would decide it at {chance:.1%}, "
            f"below its {FUTILE_BELOW:.0%} line; an estimate, right on average but not in every "
            "situation: of comparisons stopped at 3-5 %, 0.5-23 % were decided later in "
            f"simulation (docs/statistics.md); an equal verdict would need a margin of "
            f"±{needed:.0%})"
        )
    elif c.verdict == "inconclusive" and c.ratio.method == "sequential":
        why = str(record.get("stopped") or "").split(", ")[0]
        line += (
            f" (undecided when the sweep stopped{': ' + why if why else ''}; raise "
            "hydra.sweeper.max_rounds or hydra.sweeper.budget_s)"
        )
    elif c.verdict == "inconclusive" and _seeds_are_runs(c.arm):
        line += " (its runs are seeds: sweep more seeds to narrow it)"
    elif c.verdict == "inconclusive":
        line += " (repeats=auto runs rounds until it is decided)"
    d = c.step_time_diff_ms
    if d is not None and d.has_interval and math.isfinite(d.low + d.high):
        line += f"; step time {d.estimate:+.2f} ms [{d.low:+.2f}, {d.high:+.2f}]"
    if c.verdict in WINNERS and (shared := _rests_on_shared_cores(c)):
        line += f" ({shared})"
    line += _lost(c)
    if c.outliers:
        named = ", ".join(
            f"{job} ({ratio:.2f}x its configuration's median)" for job, ratio in c.outliers
        )
        line += f"; outlier run(s), kept in the verdict: {named}"
    return line


def unjudged_line(arm: Configuration, base: Configuration, axis: str) -> str:
    """A comparison with no verdict: a side has no completed run."""
    where = ", ".join(f"{k}={v}" for k, v in arm.settings if k != axis)
    empty = [c for c in (arm, base) if not c.runs()]
    said = "; ".join(
        f"{c.label()} has no completed run ({len(c.lost())} job(s) failed or stopped: "
        f"{', '.join(c.lost())})"
        if not c.unwitnessed()
        else f"{c.label()} has no run whose transport was verified ({_unwitnessed(c)})"
        for c in empty
    )
    return (
        f"- {'at ' + where + ': ' if where else ''}{axis}={arm.values_by_key[axis]} vs "
        f"{base.values_by_key[axis]}: **no verdict**: {said}"
    )


def unfinished_line(job: JobResult) -> str:
    """A job that failed or was stopped, with what its record says of why."""
    error = " ".join(str(job.get("error") or "no error recorded").split())
    shown = error if len(error) <= 300 else error[:297] + "..."
    return f"- {job.get('job')}: {job.get('status')}: {shown}"


def _unwitnessed(config: Configuration) -> str:
    """The jobs of ``config`` left out because their transport check contradicts the arm."""
    found = config.unwitnessed()
    return f"{len(found)} job(s) not verified, left out: " + "; ".join(
        f"{job}: {why}" for job, why in found
    )


def _lost(c: Comparison) -> str:
    """What a comparison lacks: its jobs that failed or were stopped, and those left out
    because their transport was not verified."""
    out = ""
    if c.lost:
        out += f"; {len(c.lost)} run(s) lost, their jobs failed or were stopped: "
        out += ", ".join(c.lost)
    for side in (c.arm, c.base):
        if side.unwitnessed():
            out += f"; {side.label()}: {_unwitnessed(side)}"
    return out


def _accuracy(c: Comparison) -> str:
    """The held-out accuracy beside the speed verdict: a speed-up counts where it holds."""
    a, found = c.accuracy, c.accuracy_verdict
    if a is None or found is None:
        return ""

    def points(sign: float = 1.0) -> str:
        low, high = sorted((sign * a.low, sign * a.high))
        shown = f"{100 * sign * a.estimate:.1f}"
        return (
            shown + (f" [{100 * low:.1f}, {100 * high:.1f}]" if a.has_interval else "") + " points"
        )

    if found == "equal":
        return f", accuracy equal within ±{100 * ACCURACY_MARGIN:.1f} points ({points()})"
    if found in ("lower", "higher"):
        but = "but " if (found == "lower") == (c.verdict == "faster") else ""
        return f", {but}accuracy {found} by {points(-1.0 if found == 'lower' else 1.0)}"
    return f", accuracy undecided ({points()} difference)"
