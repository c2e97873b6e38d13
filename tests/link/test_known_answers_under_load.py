"""The emulated links' known answers on a busy host: predictions hold what they state.

On a host busy with other work (load 5-14 on 2 cores) 6 of 19 step times read outside 15 %
of their prediction, and the summary stated each error as a point with no caveat. Here the
test makes the load itself: a CPU hog of two busy processes it starts before the sweep and
stops after, on the 2-core machine the suite runs on. Each configuration's figure must then
be either a point within 15 % of the measured step time, or the interval its inputs' readings
give (marked "inputs moved"), which must hold the measured step time within the same 15 %.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from linkbench.analysis.emulated import link_rows
from linkbench.analysis.sweep import group, load_sweep, swept_keys
from linkbench.files import SUMMARY_MD
from linkbench.link import netns

from ..conftest import run_cli
from . import assert_holds_what_it_states

PROBLEM = netns.emulation_problem(delay=False)
pytestmark = [
    pytest.mark.slow,  # two sweeps of 3 runs each beside the hog: minutes
    pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM)),
]
HOG_PROCESSES = 2


@pytest.fixture
def hog() -> Iterator[None]:
    """Two processes that spin for as long as the test runs: a host busy with other work."""
    spinning = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(HOG_PROCESSES)
    ]
    try:
        yield
    finally:
        for process in spinning:
            process.send_signal(signal.SIGKILL)
            process.wait()


@pytest.mark.parametrize(
    "args",
    [
        ["+experiment=emulated_link", "interconnect.rate_gbit_s=0.5"],
        ["+experiment=emulated_cluster", "strategy=hsdp"],  # the one that read +36 %
    ],
    ids=["link", "cluster-hsdp"],
)
def test_a_prediction_beside_a_cpu_hog_holds_what_it_states(tmp_path, hog, args):
    sweep = tmp_path / "sweep"
    one = ["hydra.callbacks.sweep_summary.axis=null", "hydra.callbacks.sweep_summary.baseline=null"]
    done = run_cli(["-m", *args, *one, "repeats=3", f"hydra.sweep.dir={sweep}"], timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    results = load_sweep(Path(sweep))
    (row,) = link_rows(group(results, swept_keys(results)))
    text = (sweep / SUMMARY_MD).read_text()
    assert_holds_what_it_states(row)
    if row.moved or row.beyond:  # an interval, and the summary says why
        assert "(inputs moved)" in text and "rests on inputs that moved" in text
        assert "other programs kept" in text, "the hog is named"
