"""A sweep reviewed in TensorBoard as it opens, by its own server and a real browser: one row
per configuration named by its settings, the headline, step time, the ratio, its interval and
the verdict as the columns shown without ticking anything, the summary one click away in
Text, no empty chart, and no figure below its noise or of negative time as data. Each
dashboard's screenshot is kept (ARTIFACTS/tensorboard-<sweep>/), which docs/screenshots.py
copies into the docs."""

from __future__ import annotations

import csv
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from linkbench.analysis.board import BASELINE, NOT_JUDGED, TEXT_TAG, VERDICT
from linkbench.files import RESULT_FILE, SUMMARY_CSV, SWEEP_RUN
from linkbench.link import netns

from ..conftest import run_cli
from ..tensorboard_view import (
    ARTIFACTS,
    CHROMIUM,
    TensorBoard,
    browser_missing,
    tensorboard,
    wait_for,
)

MISSING = browser_missing()
# .ci/run sets it: there a missing browser fails the test instead of skipping it.
REQUIRED = os.environ.get("LINKBENCH_REQUIRE_BROWSER") == "1"
needs_browser = pytest.mark.skipif(MISSING is not None and not REQUIRED, reason=str(MISSING))
SHOWN = 5  # TensorBoard's table shows the first five hyperparameter and metric columns


def summary_rows(sweep: Path) -> tuple[list[str], str, list[dict[str, str]]]:
    """summary.csv as the summary wrote it: the swept keys, the headline metric, the rows."""
    with (sweep / SUMMARY_CSV).open() as handle:
        rows = list(csv.DictReader(handle))
    columns = list(rows[0])
    axes = columns[: columns.index("status")]
    headline = columns[columns.index("runs") + 1]
    return axes, headline, rows


def expected_verdict(row: dict[str, str], axes: list[str], rows: list[dict[str, str]]) -> str:
    """What the row's verdict column must say: the summary's verdict, or baseline where an
    arm is compared against it."""
    if row["verdict"]:
        return row["verdict"]
    baselines = {(r["axis"], r["baseline"]) for r in rows if r["axis"]}
    return BASELINE if any(row.get(a) == b for a, b in baselines) else NOT_JUDGED


def check_hparams(board: TensorBoard, sweep: Path) -> dict[str, Any]:
    """The HParams experiment and rows against summary.csv; returns the experiment."""
    axes, headline, rows = summary_rows(sweep)
    experiment = board.experiment()
    shown_hparams = [h["name"] for h in experiment["hparamInfos"]][:SHOWN]
    assert {*axes, VERDICT} <= set(shown_hparams), shown_hparams
    shown_metrics = [m["name"]["tag"] for m in experiment["metricInfos"]][:SHOWN]
    wanted = [headline, "step_time_ms", "ratio", "ratio_low", "ratio_high"]
    assert shown_metrics == [f"sweep/{name}" for name in wanted], shown_metrics
    displays = [m["displayName"] for m in experiment["metricInfos"]]
    assert all(displays) and len(set(displays)) == len(displays), displays
    groups = board.groups()
    width = len(str(len(rows)))
    names = [
        f"{i:0{width}d}: " + ", ".join(f"{k}={row[k]}" for k in axes)
        for i, row in enumerate(rows, 1)
    ]
    assert [g["name"] for g in groups] == names  # one row per configuration, in order
    for group, row in zip(groups, rows, strict=True):
        assert len(group["sessions"]) == 1, group["name"]
        assert {k: group["hparams"][k] for k in axes} == {k: row[k] for k in axes}
        assert group["hparams"][VERDICT] == expected_verdict(row, axes, rows), group["name"]
        values = {m["name"]["tag"]: m["value"] for m in group["metricValues"]}
        assert values[f"sweep/{headline}"] == pytest.approx(float(row[headline]), rel=1e-5)
        for name in ("ratio", "ratio_low", "ratio_high"):
            if row[name]:
                assert values[f"sweep/{name}"] == pytest.approx(float(row[name]), rel=1e-5)
            else:
                assert f"sweep/{name}" not in values, group["name"]
        if row["comm_exposed_mark"]:  # below the probe's noise: no figure, not a wrong one
            assert not {"sweep/comm_exposed_ms", "sweep/comm_fraction"} & set(values)
        for tag, value in values.items():
            assert not (tag.endswith("_ms") and value < 0), (group["name"], tag, value)
    return experiment


def chart_series(board: TensorBoard) -> list[tuple[str, int]]:
    """Each custom-scalars chart's title, in order, and the series it draws (a run's tag its
    patterns match), as its "Matches (N)" counts them."""
    tags = board.get("data/plugin/scalars/tags")
    layout = board.get("data/plugin/custom_scalars/layout")
    return [
        (
            chart["title"],
            sum(
                any(re.search(p, tag) for p in chart["multiline"]["tag"])
                for run_tags in tags.values()
                for tag in run_tags
            ),
        )
        for category in layout["category"]
        for chart in category["chart"]
    ]


def check_runs(board: TensorBoard, sweep: Path) -> None:
    """The sweep's own run (its summary as text, its plots as images), every custom-scalars
    chart matching a series, and no job's final figure below its noise or of negative time."""
    runs = board.get("data/runs")
    own = [r for r in runs if r.startswith(f"{SWEEP_RUN}/") and r.count("/") == 1]
    assert len(own) == 1, runs  # the newest only: older summaries are removed
    text = board.get("data/plugin/text/text", run=own[0], tag=TEXT_TAG)
    summary = (sweep / "summary.md").read_text()
    assert "Verdicts" in text[-1]["text"] and "Verdicts" in summary
    for verdict in re.findall(r"\*\*(\w+)\*\*", summary):
        assert f"<strong>{verdict}</strong>" in text[-1]["text"]
    images = board.get("data/plugin/images/tags")[own[0]]
    assert {f"sweep/{p.stem}" for p in sweep.glob("*.png")} <= set(images), images
    tags = board.get("data/plugin/scalars/tags")
    charts = chart_series(board)
    assert len({title for title, _ in charts}) == len(charts), charts  # each chart once
    for title, series in charts:
        assert series > 0, title
    for job in sweep.glob(f"*/{RESULT_FILE}"):
        run = job.parent.name
        metrics = json.loads(job.read_text())["metrics"]
        if metrics.get("comm_exposed_note"):
            assert not {"final/comm_exposed_ms", "final/comm_fraction"} & set(tags[run]), run
        for tag in (t for t in tags[run] if t.endswith("_ms")):
            assert min(board.scalars(run, tag)) >= 0, (run, tag)


def check_page(board: TensorBoard, experiment: dict[str, Any], sweep: Path, shots: Path) -> None:
    """What the browser shows: the rows and the first five metrics ticked, the summary under
    Text, no empty chart; each dashboard's screenshot into ``shots``."""
    assert MISSING is None, MISSING
    from playwright.sync_api import sync_playwright

    shots.mkdir(parents=True, exist_ok=True)
    first_row = board.groups()[0]["name"]
    infos = experiment["metricInfos"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1920, "height": 1000})
            page.goto(f"{board.url}/#hparams")
            page.get_by_text(first_row, exact=True).wait_for(timeout=60_000)
            for info in infos:
                box = page.get_by_role("checkbox", name=info["displayName"], exact=True)
                assert box.is_checked() == (info in infos[:SHOWN]), info["displayName"]
            page.screenshot(path=shots / "hparams.png")
            page.goto(f"{board.url}/#text")
            page.get_by_text(TEXT_TAG, exact=True).first.wait_for(timeout=60_000)
            page.get_by_role("heading", name=re.compile("^Verdicts")).first.wait_for()
            page.screenshot(path=shots / "text.png")
            page.goto(f"{board.url}/#custom_scalars")
            # Every chart as the API lays it out, drawing its series (none "Matches (0)")
            wanted = [f"Matches ({n})" for _, n in chart_series(board)]
            matches = page.get_by_text(re.compile(r"Matches \(\d+\)"))

            def shown() -> list[str]:
                return [matches.nth(i).inner_text().strip() for i in range(matches.count())]

            wait_for("every chart's series in the page", lambda: shown() == wanted or None, 60)
            page.screenshot(path=shots / "custom_scalars.png")
            page.goto(f"{board.url}/#images")
            page.get_by_text(re.compile("^sweep/")).first.wait_for(timeout=60_000)
            page.wait_for_load_state("networkidle")
            page.screenshot(path=shots / "images.png")
        finally:
            browser.close()


def review(sweep: Path, name: str) -> dict[str, Any]:
    """The whole review of a sweep: the API's answers, then the page's; the experiment."""

    def ready(board: TensorBoard) -> bool:
        return len(board.groups()) == len(summary_rows(sweep)[2])

    with tensorboard(sweep, ready) as board:
        experiment = check_hparams(board, sweep)
        check_runs(board, sweep)
        check_page(board, experiment, sweep, ARTIFACTS / f"tensorboard-{name}")
    return experiment


@needs_browser
def test_a_reviewer_sees_the_cpu_sweeps_answer_as_tensorboard_opens(cpu_sweep):
    review(cpu_sweep.path, "cpu_smoke")


@pytest.mark.slow
@needs_browser
def test_a_reviewer_sees_the_emulated_links_answer_as_tensorboard_opens(tmp_path):
    problem = netns.emulation_problem(delay=False)
    if problem is not None:
        pytest.skip(problem)
    sweep = tmp_path / "sweep"
    done = run_cli(["-m", "+experiment=emulated_link", f"hydra.sweep.dir={sweep}"], timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    experiment = review(sweep, "emulated_link")
    displays = [m["displayName"] for m in experiment["metricInfos"]]
    assert "emulated link's all_reduce busbw, GB/s" in displays  # where there is a link
    _, _, rows = summary_rows(sweep)
    slow = next(r for r in rows if r["interconnect.rate_gbit_s"] == "0.5")
    assert slow["verdict"] == "slower"  # the known answer, as the row shows it


@pytest.mark.slow
@needs_browser
def test_a_reviewer_sees_the_readme_sweeps_answer_as_tensorboard_opens(tmp_path):
    """The README's sweep as a user types it on a CPU machine (both arms gloo: an A/A)."""
    sweep = tmp_path / "sweep"
    command = ["-m", "interconnect=nvlink,pcie", "batch=32,256", f"hydra.sweep.dir={sweep}"]
    done = run_cli(command, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    review(sweep, "readme")
