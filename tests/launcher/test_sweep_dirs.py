"""A sweep's jobs each get one directory right under the sweep's, whatever their overrides
hold: Hydra's ``override_dirname`` keeps the ``/`` of a path or a nested group, which put a
job three directories down, where the summary never looked (no summary.md was written)."""

from __future__ import annotations

import pytest
from PIL import Image

from linkbench.files import SWEEP_RUN
from linkbench.sweep_defaults import MAX_SUBDIR_BYTES, job_subdir

from ..conftest import QUICK, load_result, run_cli


def test_a_job_subdir_has_no_slash_and_keeps_different_overrides_apart():
    assert job_subdir("batch=4,data.root=/data/imagenet") == "batch=4,data.root=%2Fdata%2Fimagenet"
    assert job_subdir("strategy/comm_hook=bf16") == "strategy%2Fcomm_hook=bf16"
    names = ["a=/x", "a=%2Fx", "a=%252Fx", "a=%x", "a=x"]
    assert len({job_subdir(n) for n in names}) == len(names)
    assert all("/" not in job_subdir(n) for n in names)
    assert job_subdir("") == "" and job_subdir("seed=1") == "seed=1"


def test_a_long_job_subdir_fits_a_file_name_and_stays_apart_from_its_neighbours(tmp_path):
    """The overrides of one sweep can pass the 255 bytes a file system allows a name (the
    cluster test's fp16 sweep failed with "File name too long")."""
    base = ",".join(f"key_number_{i}.setting=/some/path/{i}" for i in range(12))
    names = [f"{base},strategy/comm_hook={h}" for h in ("fp16", "bf16")] + [f"{base},é=1"]
    subdirs = [job_subdir(n) for n in names]
    assert len(set(subdirs)) == len(names)
    assert all(len(s.encode()) <= MAX_SUBDIR_BYTES and "/" not in s for s in subdirs)
    assert all(s.startswith("key_number_0.setting=%2Fsome") for s in subdirs)
    for s in subdirs:  # each makes a directory
        (tmp_path / s).mkdir()
    assert job_subdir(names[0]) == subdirs[0]  # the same overrides, the same name


@pytest.mark.slow  # about 13 s on 2 cores; .ci/run runs it
def test_a_sweep_over_a_data_root_given_as_a_path_is_summarised(tmp_path):
    root = tmp_path / "images"
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (16, 16), (i * 30, 10, 10)).save(root / label / f"{i}.png")
    sweep = tmp_path / "sweep"
    args = ["-m", *QUICK[:3], "batch=2,4", "repeats=1", "eval.enabled=false", "data=imagefolder"]
    args += [f"data.root={root}", "data.num_workers=0", f"hydra.sweep.dir={sweep}"]
    done = run_cli(args)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name != SWEEP_RUN)
    assert len(jobs) == 2 and all(load_result(j)["status"] == "completed" for j in jobs)
    assert all(f"data.root={str(root).replace('/', '%2F')}" in j.name for j in jobs)
    assert "2 jobs, 2 completed" in (sweep / "summary.md").read_text()
