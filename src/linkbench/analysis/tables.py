"""The summary's tables below its verdicts, each with the note that says how to read it:
scaling with devices, held-out accuracy, where the step goes (traces), every job, and where
the jobs' time went. :func:`linkbench.analysis.report.markdown` puts them in order."""

from __future__ import annotations

from typing import Any

from linkbench.analysis.compare import ScalingRow
from linkbench.analysis.convergence import rules
from linkbench.analysis.phases import PHASES, ordered, sweep_phases
from linkbench.analysis.stats import Interval
from linkbench.analysis.sweep import Configuration
from linkbench.analysis.trace import STRETCH_WARNING
from linkbench.metrics import probe_mark
from linkbench.result import JobResult

TRACE_NOTE = (
    "Milliseconds per profiled step, mean over ranks and traced jobs, from the torch.profiler "
    "traces (src/linkbench/analysis/trace.py has the definitions; overlap ratio = time "
    "computing while communicating / time communicating, as HolisticTraceAnalysis defines "
    "it). The no_sync probe measures exposed communication another way: on a GPU-bound step "
    "the two should agree; on a launch-bound one (compute far below the step) the trace also "
    "counts communication that only filled idle device time, and reads higher. "
    "Untraced step ms is the timed steps' time without the profiler; a stretch above "
    f"{STRETCH_WARNING:.1f}x (!) means the profiler changed the step it describes."
)
SCALING_NOTE = (
    "Scaling efficiency = throughput(N) / (N x throughput(1)) at equal other settings, its "
    "interval from the runs' throughput ratio."
)


LAUNCH_BOUND_PCT = 85.0
"""A GPU that ran kernels for less of the timed steps than this waits on the host."""
LAUNCH_BOUND_NOTE = (
    f"The GPU ran kernels for less than {LAUNCH_BOUND_PCT:.0f} % of these configurations' timed "
    "steps (NVML's utilisation, the mean over ranks and jobs): each step waits on the host to "
    "launch its kernels, so its throughput measures the host (and what else it runs) as much "
    "as the GPU or the link, and moves with the host. cuda_graphs=true captures the whole step "
    "as one CUDA graph and replays it (docs/speed.md)."
)


def launch_bound(configs: list[Configuration]) -> list[str]:
    """One line per configuration whose GPU was busy below :data:`LAUNCH_BOUND_PCT` of its
    timed steps, not already replayed as CUDA graphs ([] where none, or without NVML)."""
    out = []
    for config in configs:
        if config.first("execution") == "cuda_graphs":
            continue
        busy = [
            hw["gpu_util_pct_mean"]
            for job in config.jobs
            if job.get("status") == "completed"
            and isinstance((hw := job.get("hw") or {}).get("gpu_util_pct_mean"), (int, float))
        ]
        if busy and (mean := sum(busy) / len(busy)) < LAUNCH_BOUND_PCT:
            out.append(f"- {config.label()}: the GPU busy {mean:.0f} % of the timed steps")
    return out


def fmt(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return "" if value is None else str(value)


def scaling_table(rows: list[ScalingRow]) -> list[str]:
    out = [
        "| configuration | devices | samples/s | scaling efficiency [95% CI] | exposed comm "
        "| peak GB/device | s/epoch |",
        "|---|---:|---:|---|---:|---:|---:|",
    ]
    for row in rows:
        c = row.config
        mean = c.mean("samples_per_sec")
        eff = row.efficiency
        shown = f"{eff.estimate:.1%} [{eff.low:.1%}, {eff.high:.1%}]" if eff else ""
        comm = c.mean("comm_fraction")
        memory = c.mean("max_allocated_gb")
        epoch = c.mean("epoch_time_s")
        out.append(
            f"| {c.label(skip='devices')} | {row.devices} | {fmt(mean and mean.mean)} | "
            f"{shown} | {f'{comm.mean:.1%}{marks(c)}' if comm else ''} | "
            f"{fmt(memory and memory.mean, 2)} | {fmt(epoch and epoch.mean, 1)} |"
        )
    return out


CONVERGENCE_NOTE = (
    "Each larger global batch against the smallest of its rule: held when its accuracy is "
    "shown within {tolerance:.1f} points of the smallest's (the lower end of the interval "
    "shown, a one-sided {level:.4g} % bound, above -{tolerance:.1f}: non-inferiority), "
    "lower when the whole interval lies below, not shown otherwise; every batch of every "
    "rule is one test of one family (Holm's step-down), so this table says anything wrong, "
    "a batch held that did not or lower that was not, in at most 5 % of sweeps "
    "(docs/statistics.md)."
)


PHASES_NOTE = (
    "Each job's wall time, from its start (after Hydra composed its config) to its "
    "result.json, phase by phase (`phases_s` in each result.json); the sweep's own time "
    "(Hydra, the plan of every configuration before the first job, the summaries) is the "
    "console's last line."
)


def trace_table(configs: list[Configuration]) -> list[str]:
    rows = []
    for config in configs:
        if (t := config.trace_means()) is None:
            continue
        ratio, stretch = t.get("overlap_ratio"), t.get("stretch")
        untraced = t.get("untraced_step_ms")
        rows.append(
            f"| {config.label()} | {t['step_ms']:.2f} | {fmt(untraced, 2)} | "
            f"{'' if stretch is None else f'{stretch:.2f}x'}"
            f"{' (!)' if stretch and stretch > STRETCH_WARNING else ''} | "
            f"{t['compute_only_ms']:.2f} | {t['overlapped_ms']:.2f} | "
            f"{t['exposed_comm_ms']:.2f} | {probe(config)} | {t['other_ms']:.2f} | "
            f"{'' if ratio is None else f'{ratio:.0%}'} |"
        )
    if not rows:
        return []
    header = (
        "| configuration | traced step ms | untraced step ms | stretch | compute only "
        "| overlapped comm | exposed comm (trace) | exposed comm (no_sync probe) | other "
        "| overlap ratio |"
    )
    return [header, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|", *rows]


def marks(config: Configuration) -> str:
    """The probe's marks of a configuration's jobs, as " (mark)", or ""."""
    marks = sorted({m for j in config.jobs if (m := probe_mark(j.get("metrics") or {}))})
    return f" ({'; '.join(marks)})" if marks else ""


def probe(config: Configuration) -> str:
    """The probe's exposed communication, with its mark when it could not measure it."""
    probe = config.mean("comm_exposed_ms")
    return "" if probe is None else f"{probe.mean:.2f}{marks(config)}"


def global_batch(config: Configuration) -> int:
    return int(config.first("global_batch") or 0)


def convergence_table(configs: list[Configuration], tolerance: float) -> list[str]:
    """Held-out accuracy per configuration, and per rule (every setting but the batch), the
    largest global batch whose accuracy stays within ``tolerance`` of the smallest batch's."""
    scored = [(c, m) for c in configs if (m := c.mean("eval_accuracy")) is not None]
    if not scored or not any(c.learnable() for c, _ in scored):
        return []  # random labels: accuracy says nothing
    out = [
        "| configuration | global batch | held-out accuracy [95% CI] | runs |",
        "|---|---:|---|---:|",
    ]
    for config, m in scored:
        shown = f"{m.mean:.2%} [{m.low:.2%}, {m.high:.2%}]" if m.has_interval else f"{m.mean:.2%}"
        out.append(f"| {config.label()} | {global_batch(config)} | {shown} | {m.runs} |")
    judged = rules([c for c, _ in scored], tolerance)
    if not judged:
        return out
    level = judged[0].confidence
    out += ["", CONVERGENCE_NOTE.format(tolerance=100 * tolerance, level=100 * level), ""]
    for rule in judged:
        shown = "; ".join(
            f"{step.global_batch}: {step.verdict}"
            + (f" ({points(step.difference)})" if step.difference is not None else "")
            for step in rule.steps
        )
        out.append(
            f"- {rule.rule}: held up to global batch {rule.held_up_to} (against "
            f"{rule.smallest_batch}; {shown})"
        )
    return out


def points(d: Interval) -> str:
    return f"{100 * d.estimate:+.1f} points, [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def jobs_table(configs: list[Configuration]) -> list[str]:
    """One row per job: where it ran, how it ended, what it measured, which transport."""
    out = [
        "| job | status | runs | headline | step ms | exposed comm | transport | verified |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for config in configs:
        key, unit = config.headline()
        for job in config.jobs:
            metrics, transport = job.get("metrics", {}), job.get("transport") or {}
            if job.get("status") != "completed":  # what it measured is kept in its result.json
                metrics = {}  # but is no headline of its configuration
            runs = len(job.get("repeat_metrics") or ([metrics] if metrics else []))
            comm, mark = metrics.get("comm_fraction"), probe_mark(metrics)
            out.append(
                f"| {job.get('job')} | {job.get('status')} | {runs} | "
                f"{fmt(metrics.get(key))} {unit if key in metrics else ''} | "
                f"{fmt(metrics.get('step_time_ms'), 2)} | "
                f"{f'{comm:.1%}' if isinstance(comm, float) else ''}"
                f"{f' ({mark})' if mark and isinstance(comm, float) else ''} | "
                f"{fmt(transport.get('transport'))} | {fmt(transport.get('verified'))} |"
            )
    return out


def phases_table(jobs: list[JobResult]) -> list[str]:
    """Where the jobs' wall time went, phase by phase over every job ([] when none says)."""
    phases, jobs_wall = sweep_phases(jobs)
    if not phases:
        return []
    return [
        f"| phase | seconds over {len(jobs)} jobs | share |",
        "|---|---:|---:|",
        *(
            f"| {PHASES.get(name, name)} | {seconds:.1f} | {seconds / jobs_wall:.0%} |"
            for name, seconds in ordered(phases)
        ),
    ]
