"""A swept setting that cannot act on the jobs (one rank, gloo, one emulated node) is named
as such before the sweep and in every verdict line: an A/A check of the harness."""

from __future__ import annotations

import pytest

from linkbench.analysis.inert import JobShape, inert_reason
from linkbench.analysis.report import write_summary

from ..conftest import QUICK, run_cli
from .fakes import fake_job

ONE_GPU = JobShape(world_size=1, backend="nccl", link_nodes=None)
EIGHT_GPUS = JobShape(world_size=8, backend="nccl", link_nodes=None)
GLOO = JobShape(world_size=2, backend="gloo", link_nodes=None)
LINKED = JobShape(world_size=2, backend="gloo", link_nodes=2)
ONE_NODE = JobShape(world_size=4, backend="gloo", link_nodes=1)


@pytest.mark.parametrize(
    ("axis", "shapes", "words"),
    [
        ("interconnect", [ONE_GPU, ONE_GPU], "one rank: no link between GPUs"),
        ("nccl.algo", [ONE_GPU], "one rank"),
        ("nccl", [GLOO, GLOO], "every job runs on gloo"),
        ("interconnect", [GLOO, LINKED], None),  # an emulated arm acts on gloo
        ("interconnect.rate_gbit_s", [LINKED, LINKED], None),
        ("interconnect.rate_gbit_s", [ONE_NODE, ONE_NODE], "one node"),
        ("interconnect", [EIGHT_GPUS, EIGHT_GPUS], None),
        ("interconnect", [ONE_GPU, EIGHT_GPUS], None),  # acts where there are ranks
        ("batch", [ONE_GPU, ONE_GPU], None),
    ],
)
def test_an_axis_is_inert_only_where_nothing_reads_it(axis, shapes, words):
    found = inert_reason(axis, shapes)
    assert (found is None) if words is None else (words in str(found)), found


def test_a_one_gpu_sweep_of_the_interconnect_says_it_compares_nccl_settings(tmp_path):
    for arm, value in (("nvlink", 900), ("pcie", 1000)):
        runs = [value, value + 5, value + 9]
        fake_job(tmp_path, [f"interconnect={arm}"], runs, fields={"world_size": 1})
    text = write_summary(tmp_path)
    assert "interconnect cannot act on these jobs (one rank: no link between GPUs" in text
    line = next(line for line in text.splitlines() if line.startswith("- interconnect=nvlink"))
    # a 10 % gap on one rank is the harness's, and the line says so beside its verdict
    assert "**slower** (an A/A check of the harness: one rank: no link between GPUs" in line


def test_the_sweep_says_so_before_its_first_job(tmp_path):
    sweep = ["-m", "interconnect=nvlink,pcie", "repeats=1", "devices=1", *QUICK]
    done = run_cli([*sweep, f"hydra.sweep.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr
    said = console.index("interconnect cannot act on these jobs (one rank: no link between GPUs")
    assert said < console.index("job 1/2")
