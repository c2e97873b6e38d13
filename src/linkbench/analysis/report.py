"""A sweep's answer: summary.md, summary.csv and plots, built from each job's result.json.

``python -m linkbench.report SWEEP_DIR`` (re)writes the summary of one sweep;
``python -m linkbench.report SWEEP_A SWEEP_B`` compares two sweeps configuration by
configuration. Verdicts come from :mod:`linkbench.analysis.compare`: a ratio with its 95 %
interval from runs, and ``faster``, ``slower``, ``equal`` or ``inconclusive``.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from linkbench.analysis.board import write_board
from linkbench.analysis.compare import (
    DEFAULT_AXIS,
    FAMILIES,
    Comparison,
    ScalingRow,
    SweepComparisons,
    across_sweeps,
    default_axis,
    scaling_rows,
    sweep_comparisons,
)
from linkbench.analysis.conditions import drifted
from linkbench.analysis.emulated import NOTE as LINK_NOTE
from linkbench.analysis.emulated import link_rows, moved_notes, rate_warnings, slow_uplink_lines
from linkbench.analysis.emulated import table as link_table
from linkbench.analysis.inert import a_a_note, inert_reason, shape_of
from linkbench.analysis.sequential import Design, sweep_design
from linkbench.analysis.stats import (
    CONFIDENCE,
    DEFAULT_MARGIN,
)
from linkbench.analysis.sweep import (
    REPEAT_KEYS,
    Configuration,
    group,
    job_settings,
    load_sweep,
    read_sweep,
    swept_keys,
)
from linkbench.analysis.tables import (
    LAUNCH_BOUND_NOTE,
    PHASES_NOTE,
    SCALING_NOTE,
    TRACE_NOTE,
    convergence_table,
    jobs_table,
    launch_bound,
    marks,
    phases_table,
    scaling_table,
    trace_table,
)
from linkbench.analysis.verdict_lines import (
    mean_text,
    span,
    unfinished_line,
    unjudged_line,
    verdict_line,
)
from linkbench.files import (
    MULTIRUN_FILE,
    RESULT_FILE,
    SUMMARY_CSV,
    SUMMARY_MD,
    DamagedRecord,
    read_rounds,
    replace_atomically,
)
from linkbench.link.fabric import MIN_NODES, SLOW_SHARE
from linkbench.metrics import table
from linkbench.result import JobResult, UnknownLayout

DEFAULT_TOLERANCE = 0.01  # held-out accuracy "stays" within one point of the smallest batch's
METHOD = (
    "Method: each ratio is of geometric means, its {confidence:.4g} % interval from runs (a "
    "paired t-interval over the rounds both ran, else Welch's); faster/slower: the interval "
    "excludes 1 and the estimate lies outside ±{margin:.0%}; equal: the interval lies inside "
    "±{margin:.0%}. How and why: docs/statistics.md."
)
ADAPTIVE_METHOD = (
    "Method: adaptive rounds looked after every round and stopped each comparison once "
    "decided, so each paired interval is one of the {design}, and the verdict where it stopped "
    "keeps its error; faster/slower: the interval excludes 1 and the estimate lies outside "
    "±{margin:.0%}; equal: the interval lies inside ±{margin:.0%}; a comparison the rounds left "
    "could hardly decide stops as beyond deciding. How and why: docs/statistics.md."
)
DRIFT_NOTE = (
    "What the machine was doing differed for these jobs from the other jobs of their round "
    "(host load at a run's start or end, the GPU's mean SM clock or temperature over the "
    "timed steps, clocks held down for power or heat; src/linkbench/analysis/conditions.py): "
    "a reason to read their runs with care. Nothing is dropped for it."
)
FAMILY_NOTES = {
    "none": "Each comparison's 5 % error stands alone (family=none): of {m} A/A comparisons, "
    "each may read faster or slower by chance in 5 % of sweeps.",
    "bonferroni": "Bonferroni over the {m} comparisons (family=bonferroni): each interval at "
    "1 - 5 %/{m} = {confidence:.4g} %, so all {m} hold together with 95 % and an A/A sweep "
    "names a winner anywhere in at most 5 % of sweeps.",
    "holm": "Holm over the {m} comparisons (family=holm, the default): each interval at "
    "1 - 5 %/{m}, then, with k decided faster or slower, the rest at 1 - 5 %/({m} - k); here "
    "{k} first, the intervals shown at {confidence:.4g} %. An A/A sweep names a winner "
    "anywhere in at most 5 % of sweeps.",
}


def markdown(
    sweep_dir: Path,
    found: SweepComparisons,
    scaling: list[ScalingRow],
    margin: float,
    tolerance: float = DEFAULT_TOLERANCE,
    design: Design | None = None,
    rounds: dict[str, Any] | None = None,
    unreadable: list[str] | None = None,
) -> str:
    """The summary's text. ``rounds``: the adaptive sweep's record, for its own summary
    (None in a re-analysis along another axis, whose comparisons its rounds did not run
    for); ``unreadable``: jobs whose record could not be read."""
    configs, comparisons, confidence = found.configs, found.comparisons, found.confidence
    jobs = [j for c in configs for j in c.jobs]
    done = sum(j.get("status") == "completed" for j in jobs)
    out = [f"# Sweep summary: {sweep_dir}", "", f"{len(jobs)} jobs, {done} completed.", ""]
    if unreadable:
        out += [
            f"{len(unreadable)} more job(s) left out: their {RESULT_FILE} cannot be read (cut "
            f"short, or not JSON): {', '.join(unreadable)}.",
            "",
        ]
    if design is not None and rounds is not None:
        out += [_rounds_line(rounds, design), ""]
    elif design is not None:
        out += [
            "A re-analysis: the sweep's adaptive rounds ran for its own comparisons "
            f"({SUMMARY_MD} beside its jobs), not for these.",
            "",
        ]
    if found.axis_note and not comparisons:
        out += [found.axis_note, ""]
    if found.unjudged and not comparisons:
        arm, base = found.unjudged[0]
        axis = next(k for k, _ in arm.settings if arm.values_by_key[k] != base.values_by_key[k])
        out += [f"## Verdicts: {axis} against {axis}={base.values_by_key[axis]}", ""]
        out += [unjudged_line(arm, base, axis) for arm, base in found.unjudged] + [""]
    if comparisons:
        axis = comparisons[0].axis
        out += [f"## Verdicts: {axis} against {axis}={comparisons[0].baseline}", ""]
        if found.axis_note:
            out += [found.axis_note, ""]
        out += [unjudged_line(arm, base, axis) for arm, base in found.unjudged]
        if inert := inert_reason(axis, map(shape_of, jobs)):
            out += [a_a_note(axis, inert), ""]
        out += [verdict_line(c, rounds, inert) for c in comparisons]
        method = METHOD.format(confidence=100 * confidence, margin=margin)
        if design is not None:
            method = ADAPTIVE_METHOD.format(design=design.describe(confidence), margin=margin)
        m = len(comparisons)
        if m > 1:
            note = FAMILY_NOTES[found.family]
            method += " " + note.format(m=m, k=found.decided_first, confidence=100 * confidence)
        out += ["", method, ""]
    if bound := launch_bound(configs):
        out += ["## Launch-bound configurations", "", LAUNCH_BOUND_NOTE, "", *bound, ""]
    if unlike := drifted(jobs):
        out += ["## Runs unlike their round mates", "", DRIFT_NOTE, "", *unlike, ""]
    if scaling:
        out += ["## Scaling with devices", "", SCALING_NOTE, "", *scaling_table(scaling), ""]
    if convergence := convergence_table(configs, tolerance):
        out += ["## Convergence: held-out accuracy", "", *convergence, ""]
    if breakdown := trace_table(configs):
        out += ["## Where the step goes (profile=trace)", "", TRACE_NOTE, "", *breakdown, ""]
    if links := link_table(rows := link_rows(configs)):
        out += ["## Emulated links: measured against the bytes", "", LINK_NOTE, "", *links, ""]
        out += [*(moved := moved_notes(rows)), *([""] if moved else [])]
    if slow := rate_warnings(configs):
        out += ["## Emulated links slower than their set rate", "", *slow, ""]
    if slow := slow_uplink_lines(configs):
        out += ["## Emulated links: slow uplinks, found by measurement", "", SLOW_NOTE, "",
                *slow, ""]  # fmt: skip
    if unfinished := [j for j in jobs if j.get("status") != "completed"]:
        out += ["## Jobs that did not complete", "", *map(unfinished_line, unfinished), ""]
    out += [f"## Configurations: geometric mean [{CONFIDENCE:.0%} interval over runs]", ""]
    for config in configs:
        key, unit = config.headline()
        out.append(f"- {config.label()}: {mean_text(config.mean(key), unit)}")
    out += ["", "## Jobs", "", *jobs_table(configs)]
    if phases := phases_table(jobs):
        out += ["", "## Where the jobs' time went", "", PHASES_NOTE, "", *phases]
    return "\n".join(out) + "\n"


SLOW_NOTE = (
    f"Each run of {MIN_NODES} or more emulated nodes sends between the first ranks of each pair of "
    "nodes, one way at a time: a pair moves at its slower uplink's pace, an uplink's rate is "
    f"the fastest pair it took part in, and an uplink reading below {SLOW_SHARE:.0%} of the "
    "other uplinks' median is named (its settings are not read). Two nodes make one pair, "
    "whose slower uplink cannot be told apart."
)


def _rounds_line(record: dict[str, Any], design: Design) -> str:
    """How an adaptive sweep ended: its rounds and why it stopped."""
    rounds = record.get("rounds") or []
    stopped = record.get("stopped") or "still running, or stopped from outside"
    return (
        f"Adaptive rounds: {len(rounds)} round(s) of at most {design.max_rounds}; "
        f"stopped: {stopped}."
    )


def configuration_rows(
    keys: list[str],
    configs: list[Configuration],
    comparisons: list[Comparison],
    scaling: list[ScalingRow],
) -> list[dict[str, Any]]:
    """summary.csv: one row per configuration, with its comparison and scaling efficiency
    where it has them."""
    by_arm = {id(c.arm): c for c in comparisons}
    efficiency = {id(r.config): r.efficiency for r in scaling if r.efficiency is not None}
    rows = []
    for config in configs:
        key, _ = config.headline()
        mean = config.mean(key)
        transport = config.first("transport") or {}
        found = by_arm.get(id(config))
        rows.append(
            {
                **{k: config.values_by_key.get(k) for k in keys if k not in REPEAT_KEYS},
                "status": config.status,
                "task": config.first("task") or "train",
                "runs": len(config.values(key)),
                key: mean and mean.mean,
                f"{key}_low": mean.low if mean and mean.has_interval else None,
                f"{key}_high": mean.high if mean and mean.has_interval else None,
                **{m.name: _mean_of(config, m.name) for m in table() if m.column and m.name != key},
                "comm_exposed_mark": marks(config).strip(" ()") or None,
                "transport": transport.get("transport"),
                "verified": transport.get("verified"),
                "axis": found and found.axis,
                "baseline": found and found.baseline,
                "ratio": found and found.ratio.estimate,
                "ratio_low": found and found.ratio.low,
                "ratio_high": found and found.ratio.high,
                "verdict": found and found.verdict,
            }
        )
        if (scaled := efficiency.get(id(config))) is not None:
            rows[-1].update(
                scaling_efficiency=scaled.estimate,
                scaling_efficiency_low=scaled.low,
                scaling_efficiency_high=scaled.high,
            )
    return rows


def _mean_of(config: Configuration, key: str) -> float | None:
    found = config.mean(key)
    return found.mean if found is not None else None


def write_summary(
    sweep_dir: Path,
    axis: str | None = None,
    baseline: Any = None,
    margin: float = DEFAULT_MARGIN,
    tolerance: float = DEFAULT_TOLERANCE,
    plots: bool = True,
    family: str = FAMILIES[0],
    out_dir: Path | None = None,
    read: tuple[list[JobResult], list[str]] | None = None,
) -> str | None:
    """Write summary.csv, summary.md, (with ``plots``) the plots and the sweep's TensorBoard
    run (:mod:`linkbench.analysis.board`) into ``out_dir`` (the sweep directory: its own
    summary; another: a re-analysis beside it); return the markdown. ``read``: the sweep as
    :func:`read_sweep` read it, where the caller did.

    ``axis`` defaults to ``interconnect`` when it is swept; ``baseline`` to ``pcie`` for
    interconnect, else the axis's first value; ``family``: holm, bonferroni or none
    (:func:`linkbench.analysis.compare.sweep_comparisons`)."""
    results, unreadable = read or read_sweep(sweep_dir)
    if not results:
        return None
    out_dir = out_dir or sweep_dir
    own = out_dir.resolve() == sweep_dir.resolve()
    design = sweep_design(sweep_dir)
    found = sweep_comparisons(results, axis, baseline, margin, design, family)
    keys, configs, comparisons = found.keys, found.configs, found.comparisons
    scaling = scaling_rows(configs) if "devices" in keys else []
    rows = configuration_rows(keys, configs, comparisons, scaling)
    columns = list(dict.fromkeys(c for row in rows for c in row))
    rounds = (read_rounds(sweep_dir) or {}) if own else None
    text = markdown(sweep_dir, found, scaling, margin, tolerance, design, rounds, unreadable)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        replace_atomically(out_dir / SUMMARY_CSV, lambda tmp: _write_csv(tmp, columns, rows))
        replace_atomically(out_dir / SUMMARY_MD, lambda tmp: tmp.write_text(text))
        if plots:
            from linkbench.analysis.plots import plot_sweep

            drawn = plot_sweep(out_dir, configs, comparisons)
        else:  # drawn last time (after a round), and shown until drawn again
            drawn = sorted(out_dir.glob("*.png"))
        write_board(out_dir, found, text, drawn, own, len(results) + len(unreadable))
    except OSError as error:
        raise SummaryNotWritten(text, out_dir, error) from error
    return text


class SummaryNotWritten(OSError):
    """The summary was made but could not be written (a full disk): ``text`` holds it, for
    the console. Each file is written whole or not at all."""

    def __init__(self, text: str, out_dir: Path, error: OSError) -> None:
        super().__init__(error.errno, error.strerror)
        self.text, self.out_dir = text, out_dir
        free = shutil.disk_usage(out_dir).free if out_dir.exists() else 0
        self.reason = f"{error.strerror or error} ({free:,} bytes free)"


def _write_csv(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def own_summary_settings(sweep_dir: Path) -> dict[str, Any]:
    """The summary settings the sweep ran with (``hydra.callbacks.sweep_summary`` in its
    multirun.yaml: axis, baseline, margin, family), so that regenerating its summary gives
    the same one; {} when the file is not there."""
    import yaml

    try:
        saved = yaml.safe_load((sweep_dir / MULTIRUN_FILE).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return {}
    summary = ((saved.get("hydra") or {}).get("callbacks") or {}).get("sweep_summary") or {}
    return {k: summary[k] for k in ("axis", "baseline", "margin", "family") if k in summary}


def compare_sweeps(
    sweep_a: Path, sweep_b: Path, margin: float = DEFAULT_MARGIN, family: str = FAMILIES[0]
) -> str:
    """B against A for every configuration both sweeps ran (Welch intervals: the rounds of
    two sweeps do not pair), the verdicts a family as a sweep's are."""
    loaded = {d: load_sweep(d) for d in (sweep_a, sweep_b)}
    keys = swept_keys(loaded[sweep_a] + loaded[sweep_b])
    rows, confidence, decided = across_sweeps(
        group(loaded[sweep_a], keys), group(loaded[sweep_b], keys), margin, family
    )
    out = [
        f"# {sweep_b} (B) against {sweep_a} (A)",
        "",
        f"| configuration | A | B | B/A [{100 * confidence:.4g}% CI] | runs A, B | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        a, b, ratio = row.a, row.b, row.ratio
        key, unit = a.headline()
        if ratio is None or b is None:
            where = "missing in B" if b is None else "no completed run on a side"
            out.append(f"| {a.label()} | {mean_text(a.mean(key), unit)} | | | | {where} |")
            continue
        shown = span(ratio) if ratio.has_interval else f"{ratio.estimate:.3f}x"
        mean_a, mean_b = a.mean(key), b.mean(key)
        assert mean_a is not None and mean_b is not None  # both have values
        out.append(
            f"| {a.label()} | {mean_a.mean:,.1f} {unit} | {mean_b.mean:,.1f} {unit} | {shown} | "
            f"{len(a.values(key))}, {len(b.values(key))} | {row.verdict} |"
        )
    method = METHOD.format(confidence=100 * confidence, margin=margin)
    m = sum(r.ratio is not None for r in rows)
    if m > 1 and family != "none":
        note = FAMILY_NOTES[family].format(m=m, k=decided, confidence=100 * confidence)
        method += " " + note.replace("A/A sweep", "A/A pair of sweeps")
    out += ["", method]
    return "\n".join(out) + "\n"


def same_value(value: Any, text: str) -> bool:
    """Whether a value given on the command line (1, "1.0") is a swept value's text ("1")."""
    try:
        return float(value) == float(text)
    except (TypeError, ValueError):
        return str(value) == text


def axis_problem(
    varied: Mapping[str, Sequence[str]],
    axis: str | None,
    baseline: Any,
    option: Callable[[str, Any], str] = lambda name, value: f"--{name} {value}",
) -> str | None:
    """Why a summary's axis and baseline name nothing the sweep varied (None: they do), for
    ``varied``: each key the sweep varies -> its values. ``option`` spells the setting the
    way the user gave it (``--axis x`` to the report; the sweep's callback key to run.py)."""
    keys = list(varied)
    if axis is None:
        if baseline is None:
            return None
        axis = default_axis(keys)
        if axis is None:
            return (
                f"{option('baseline', baseline)} needs an axis: this sweep varies "
                f"{', '.join(keys) or 'no key'}, so none is the default ({DEFAULT_AXIS} is, "
                f"where it is swept, or the one key swept); add "
                f"{option('axis', (keys or ['<a key>'])[0])} (or another key it varies)."
            )
    if axis not in keys:
        return (
            f"{option('axis', axis)} is not a key this sweep varies; choose one of "
            f"{', '.join(keys) or '(none: vary a key first)'}."
        )
    if baseline is not None and not any(same_value(baseline, v) for v in varied[axis]):
        return (
            f"{option('baseline', baseline)} is not a value of {axis} in this sweep; choose "
            f"one of {', '.join(varied[axis])}."
        )
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m linkbench.report",
        description="Summarise a sweep directory, or compare two (B against A). With no "
        "option the sweep's own summary is written again, with the settings it ran with; "
        "with another axis, baseline, margin or family, a re-analysis is written beside it.",
    )
    parser.add_argument("sweeps", nargs="+", type=Path, help="SWEEP_DIR, or SWEEP_A SWEEP_B")
    parser.add_argument("--axis", default=None, help="swept key to compare along")
    parser.add_argument("--baseline", default=None, help="the axis value to compare against")
    parser.add_argument("--margin", type=float, default=None, help="equal within ±")
    parser.add_argument(
        "--family", choices=FAMILIES, default=None,
        help="how the verdicts hold together (default holm; none: each comparison alone)",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="where a re-analysis goes (default: SWEEP_DIR/reanalysis-AXIS)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    try:
        return _run(args, parser)
    except (UnknownLayout, DamagedRecord) as error:
        print(error, file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The report the command line asks for: its exit status."""
    if len(args.sweeps) > 2:
        parser.error("give one sweep directory, or two to compare")
    for sweep in args.sweeps:
        if not any(sweep.glob(f"*/{RESULT_FILE}")):
            print(
                f"{sweep} holds no job with a {RESULT_FILE}: pass a sweep directory",
                file=sys.stderr,
            )
            return 2
    if len(args.sweeps) == 2:
        margin = DEFAULT_MARGIN if args.margin is None else args.margin
        family = args.family or FAMILIES[0]
        print(compare_sweeps(args.sweeps[0], args.sweeps[1], margin=margin, family=family))
        return 0
    sweep = args.sweeps[0]
    own = {"axis": None, "baseline": None, "margin": DEFAULT_MARGIN, "family": FAMILIES[0]}
    own.update(own_summary_settings(sweep))
    given = {k: getattr(args, k) for k in own if getattr(args, k) is not None}
    chosen = {**own, **given}
    read = read_sweep(sweep)
    results = read[0]
    varied = {
        key: sorted({str(job_settings(r).get(key)) for r in results})
        for key in swept_keys(results)
        if key != "round"
    }
    if problem := axis_problem(varied, chosen["axis"], chosen["baseline"]):
        print(problem, file=sys.stderr)
        return 2
    out = args.out
    if out is None and any(str(v) != str(own[k]) for k, v in given.items()):
        out = sweep / f"reanalysis-{chosen['axis'] or 'default'}"
    try:
        print(write_summary(sweep, plots=True, out_dir=out, read=read, **chosen))
    except SummaryNotWritten as error:
        print(error.text)
        print(f"the summary could not be written into {error.out_dir}: {error.reason}",
              file=sys.stderr)  # fmt: skip
        return 1
    where = out or sweep
    print(f"written: {where / SUMMARY_CSV}, {where / SUMMARY_MD} and plots")
    return 0
