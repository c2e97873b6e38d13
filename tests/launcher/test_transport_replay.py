"""The job's transport check on recorded multi-rank NCCL logs, as a multi-GPU job leaves them.

Each recorded log under tests/link/data/nccl/ holds the lines of every rank of one job; the
replay splits them into the per-rank files a job's workers write (``logs/nccl.rank<N>.log``),
plans the job as on a machine with as many GPUs, and runs the launcher's own check: the
console lines and result.json's ``transport`` block are what a multi-GPU job would show.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest

from linkbench.config.machine import Machine
from linkbench.config.overrides import JobOverrides
from linkbench.launcher.job import check_transport
from linkbench.launcher.record import JobRecord

from ..conftest import job_plan

DATA = Path(__file__).resolve().parents[1] / "link" / "data" / "nccl"
RANK = re.compile(r"^\S+ \[(\d+)\] NCCL ")


def replay(log_name: str, job_dir: Path, ranks: int) -> None:
    """Split a recorded log into the per-rank files a job's workers write."""
    logs = job_dir / "logs"
    logs.mkdir(parents=True)
    by_rank: dict[int, list[str]] = {r: [] for r in range(ranks)}
    for line in (DATA / log_name).read_text().splitlines(keepends=True):
        match = RANK.match(line)
        by_rank[int(match.group(1)) if match else 0].append(line)
    for rank, lines in by_rank.items():
        (logs / f"nccl.rank{rank}.log").write_text("".join(lines))


def check(compose_config, tmp_path: Path, arm: str, log_name: str, ranks: int, caplog):
    """The console's transport lines and result.json's transport block of the replayed job."""
    cfg = compose_config([f"interconnect={arm}", "model=tiny", "precision=bf16"])
    machine = Machine(cuda_devices=ranks)
    plan = job_plan(cfg, str(tmp_path), [f"interconnect={arm}"], machine)
    assert (plan.backend, plan.world_size) == ("nccl", ranks)
    replay(log_name, tmp_path, ranks)
    record = JobRecord(tmp_path, JobOverrides.of([f"interconnect={arm}"]))
    record.planned(plan)
    with caplog.at_level(logging.INFO, logger="linkbench"):
        record.add_transport(check_transport(plan))
    record.complete()
    record.write()
    lines = [r.getMessage() for r in caplog.records if "transport" in r.getMessage().lower()]
    return lines, json.loads((tmp_path / "result.json").read_text())["transport"]


@pytest.mark.parametrize(
    ("arm", "log_name", "ranks", "expected"),
    [
        ("nvlink", "nccl-2.21-nvlink-nvls.log", 4, "P2P"),
        ("pcie", "nccl-2.21-pcie-shm.log", 2, "SHM"),
        ("socket", "nccl-2.27-socket.log", 2, "NET"),
    ],
)
def test_a_verified_arm_prints_one_transport_line(
    compose_config, tmp_path, caplog, arm, log_name, ranks, expected
):
    lines, transport = check(compose_config, tmp_path, arm, log_name, ranks, caplog)
    assert transport["verified"] is True, transport
    assert transport["expected"] == expected and transport["transport"] == expected
    assert lines == [f"transport verified: {transport['reason']}"]
    assert transport["summary"]["files"] == [
        str(tmp_path / "logs" / f"nccl.rank{r}.log") for r in range(ranks)
    ]
    assert transport["repeats_checked"] == 1


@pytest.mark.parametrize(
    ("arm", "log_name", "ranks", "because"),
    [
        ("pcie", "nccl-2.21-nvlink-nvls.log", 4, "P2P and 16 NVLS channels"),
        ("nvlink", "nccl-2.21-pcie-shm.log", 2, "no P2P channel: NCCL used SHM"),
    ],
)
def test_a_refuted_arm_prints_one_warning(
    compose_config, tmp_path, caplog, arm, log_name, ranks, because
):
    lines, transport = check(compose_config, tmp_path, arm, log_name, ranks, caplog)
    assert transport["verified"] is False
    assert because in transport["reason"]
    assert len(lines) == 1 and lines[0].startswith("!!! TRANSPORT NOT VERIFIED: ")
    assert caplog.records[-1].levelno == logging.WARNING


def test_an_unverifiable_job_says_why_once(compose_config, tmp_path, caplog):
    """interconnect=auto expects no transport: one line saying so, not a verdict."""
    shutil.rmtree(tmp_path)
    lines, transport = check(compose_config, tmp_path, "auto", "nccl-2.21-pcie-shm.log", 2, caplog)
    assert transport["verified"] is None
    assert lines == [f"transport SHM, not verified: {transport['reason']}"]
