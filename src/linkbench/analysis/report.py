"""A sweep's answer: summary.csv, summary.md and plots, built from each job's result.json.

``python -m linkbench.report SWEEP_DIR`` (re)writes the summary of one sweep;
``python -m linkbench.report SWEEP_A SWEEP_B`` compares two sweeps configuration by
configuration. Jobs that differ only in ``seed`` (or ran ``repeats`` > 1) are repeats of one
configuration: its value is their median and its noise their min-max. A speedup of one
interconnect over the baseline (``--baseline``, default pcie) at equal other settings is
"within noise" when the two ranges overlap.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from linkbench.files import RESULT_FILE, headline, override_values, read_json

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
REPEAT_KEYS = ("seed",)


@dataclass
class Config:
    """One configuration of a sweep (jobs equal but for the seed) and its measurements."""

    settings: tuple[tuple[str, Any], ...]
    jobs: list[dict[str, Any]] = field(default_factory=list)

    def headline(self) -> tuple[str, str]:
        """(metric, unit) of this configuration's task."""
        return headline(self.jobs[0])

    def runs(self) -> list[dict[str, Any]]:
        """Every repeat's metrics, of every completed job."""
        out: list[dict[str, Any]] = []
        for job in self.jobs:
            if job.get("status") == "completed":
                out += job.get("repeat_metrics") or [job["metrics"]]
        return out

    def values(self, key: str) -> list[float]:
        return [m[key] for m in self.runs() if isinstance(m.get(key), (int, float))]

    def noise(self, key: str) -> tuple[float, float, float] | None:
        """(median over runs, min, max); for samples/s the range also spans every run's
        timing windows, so one run still shows how much its throughput moved."""
        values = self.values(key)
        if not values:
            return None
        low, high = min(values), max(values)
        if key == "samples_per_sec":
            for m in self.runs():
                if "step_time_ms_max" in m:
                    samples_ms = m["samples_per_sec"] * m["step_time_ms"]  # global batch x 1000
                    low = min(low, samples_ms / m["step_time_ms_max"])
                    high = max(high, samples_ms / m["step_time_ms_min"])
        return statistics.median(values), low, high


def load_sweep(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's result.json under the sweep directory, in path order."""
    results = []
    for path in sorted(sweep_dir.glob(f"*/{RESULT_FILE}")):
        result = read_json(path)
        if result is not None:
            result["job"] = path.parent.name
            results.append(result)
    return results


def swept_keys(results: list[dict[str, Any]]) -> list[str]:
    """Override keys whose values differ between the jobs, in first-seen order."""
    seen: dict[str, set] = {}
    for result in results:
        for key, value in override_values(result.get("overrides", [])).items():
            seen.setdefault(key, set()).add(str(value))
    return [k for k, values in seen.items() if len(values) > 1]


def _order(settings: tuple[tuple[str, Any], ...]) -> tuple:
    """Sort key: numbers by value, everything else by text."""
    return tuple((0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v)) for _, v in settings)


def group(results: list[dict[str, Any]], keys: list[str]) -> list[Config]:
    """Jobs grouped into configurations, in the order of their swept values."""
    configs: dict[tuple, Config] = {}
    settings_keys = [k for k in keys if k not in REPEAT_KEYS]
    for result in results:
        values = override_values(result.get("overrides", []))
        settings = tuple((k, values.get(k)) for k in settings_keys)
        configs.setdefault(settings, Config(settings)).jobs.append(result)
    return sorted(configs.values(), key=lambda c: _order(c.settings))


def speedup(config: Config, configs: list[Config], key: str, baseline: str) -> dict | None:
    """This configuration's median over the baseline interconnect's, at equal other settings."""
    settings = dict(config.settings)
    if "interconnect" not in settings or settings["interconnect"] == baseline:
        return None
    wanted = {**settings, "interconnect": baseline}
    base = next((c for c in configs if dict(c.settings) == wanted), None)
    ours, theirs = config.noise(key), base.noise(key) if base else None
    if not ours or not theirs:
        return None
    overlap = ours[1] <= theirs[2] and theirs[1] <= ours[2]
    return {"ratio": ours[0] / theirs[0], "within_noise": overlap, "baseline": baseline}


def _fmt(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return "" if value is None else str(value)


def job_rows(keys: list[str], configs: list[Config], baseline: str) -> list[dict[str, Any]]:
    rows = []
    for config in configs:
        key, _ = config.headline()
        gain = speedup(config, configs, key, baseline)
        for job in config.jobs:
            metrics, transport = job.get("metrics", {}), job.get("transport") or {}
            values = override_values(job.get("overrides", []))
            rows.append(
                {
                    **{k: values.get(k) for k in keys},
                    "job": job["job"],
                    "status": job.get("status"),
                    "task": job.get("task", "train"),
                    key: metrics.get(key),
                    "step_time_ms": metrics.get("step_time_ms"),
                    "comm_fraction": metrics.get("comm_fraction"),
                    "transport": transport.get("transport"),
                    "verified": transport.get("verified"),
                    f"speedup_vs_{baseline}": gain["ratio"] if gain else None,
                    "within_noise": gain["within_noise"] if gain else None,
                }
            )
    return rows


def verdicts(configs: list[Config], baseline: str) -> list[str]:
    """One sentence per configuration compared with the baseline interconnect."""
    lines = []
    for config in configs:
        key, unit = config.headline()
        gain = speedup(config, configs, key, baseline)
        if gain is None:
            continue
        settings = dict(config.settings)
        where = ", ".join(f"{k}={v}" for k, v in settings.items() if k != "interconnect")
        verdict = (
            f"the difference is within the noise ({gain['ratio']:.2f}x, ranges overlap)"
            if gain["within_noise"]
            else f"{settings['interconnect']} is {gain['ratio']:.2f}x {baseline}"
        )
        lines.append(f"- {'at ' + where + ': ' if where else ''}{verdict} ({unit})")
    return lines


def markdown(sweep_dir: Path, rows: list[dict], configs: list[Config], baseline: str) -> str:
    out = [f"# Sweep summary: {sweep_dir}", ""]
    done = sum(r["status"] == "completed" for r in rows)
    out += [f"{len(rows)} jobs, {done} completed.", ""]
    if lines := verdicts(configs, baseline):
        out += [f"## Interconnect vs {baseline}", ""]
        if all(j.get("backend") == "gloo" for c in configs for j in c.jobs):
            out += [
                "Every job ran on gloo, where the interconnect setting has no effect: these "
                "differences are run-to-run noise, not link speed.",
                "",
            ]
        out += [*lines, ""]
    out += ["## Configurations: median [min-max over runs and their timing windows]", ""]
    for config in configs:
        key, unit = config.headline()
        stats = config.noise(key)
        name = ", ".join(f"{k}={v}" for k, v in config.settings) or "(one configuration)"
        shown = f"{stats[0]:,.1f} [{stats[1]:,.1f}-{stats[2]:,.1f}] {unit}" if stats else "no data"
        runs = len(config.values(key))
        source = f"{runs} runs" if runs > 1 else "1 run"
        out.append(f"- {name}: {shown} ({source})")
    out += ["", "## Jobs", ""]
    if rows:
        columns = list(rows[0])
        out.append("| " + " | ".join(columns) + " |")
        out.append("|" + "---|" * len(columns))
        for row in rows:
            out.append("| " + " | ".join(_fmt(row[c], 3) for c in columns) + " |")
    return "\n".join(out) + "\n"


def write_summary(sweep_dir: Path, baseline: str = "pcie") -> str | None:
    """Write summary.csv, summary.md and plots into the sweep directory; return the markdown."""
    results = load_sweep(sweep_dir)
    if not results:
        return None
    keys = swept_keys(results)
    configs = group(results, keys)
    rows = job_rows(keys, configs, baseline)
    columns = list(dict.fromkeys(c for row in rows for c in row))
    with (sweep_dir / SUMMARY_CSV).open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    text = markdown(sweep_dir, rows, configs, baseline)
    (sweep_dir / SUMMARY_MD).write_text(text)
    from linkbench.analysis.plots import plot_sweep

    plot_sweep(sweep_dir, configs)
    return text


def compare(sweep_a: Path, sweep_b: Path) -> str:
    """B against A for every configuration both sweeps ran."""
    loaded = {d: load_sweep(d) for d in (sweep_a, sweep_b)}
    keys = swept_keys(loaded[sweep_a] + loaded[sweep_b])
    configs = {d: {c.settings: c for c in group(r, keys)} for d, r in loaded.items()}
    out = [
        f"# {sweep_b} vs {sweep_a}",
        "",
        "| configuration | A | B | B/A | verdict |",
        "|---|---|---|---|---|",
    ]
    for settings, a in configs[sweep_a].items():
        b = configs[sweep_b].get(settings)
        key, unit = a.headline()
        na, nb = a.noise(key), b.noise(key) if b else None
        name = ", ".join(f"{k}={v}" for k, v in settings) or "(all)"
        if not na or not nb:
            out.append(f"| {name} | {_fmt(na and na[0])} | {_fmt(nb and nb[0])} | | missing |")
            continue
        overlap = na[1] <= nb[2] and nb[1] <= na[2]
        verdict = "within noise" if overlap else ("B faster" if nb[0] > na[0] else "B slower")
        ratio = nb[0] / na[0]
        out.append(
            f"| {name} | {na[0]:,.1f} {unit} | {nb[0]:,.1f} {unit} | {ratio:.2f} | {verdict} |"
        )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m linkbench.report",
        description="Summarise a sweep directory, or compare two (B against A).",
    )
    parser.add_argument("sweeps", nargs="+", type=Path, help="SWEEP_DIR, or SWEEP_A SWEEP_B")
    parser.add_argument("--baseline", default="pcie", help="interconnect to compare against")
    args = parser.parse_args(argv)
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
        print(compare(*args.sweeps))
        return 0
    print(write_summary(args.sweeps[0], args.baseline))
    print(f"written: {args.sweeps[0] / SUMMARY_CSV}, {args.sweeps[0] / SUMMARY_MD} and plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
