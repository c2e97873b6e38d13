"""One rank of a job: its environment, logging, device and process group.

:func:`worker_main` is the function the elastic launcher starts in every worker process. It
applies the job's interconnect variables before anything touches NCCL, so they reach this
job's workers and nothing else.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import torch
import torch.distributed as dist

from linkbench.interconnect import apply_env
from linkbench.plan import JobPlan
from linkbench.train import Rank, train


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


def _setup_device(plan: JobPlan, local_rank: int) -> torch.device:
    if plan.device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    if "OMP_NUM_THREADS" not in os.environ:
        # As torchrun does: share the cores between the ranks instead of oversubscribing them.
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        torch.set_num_threads(max(1, (cores or 1) // plan.nproc_per_node))
    return torch.device("cpu")


def worker_main(plan: JobPlan) -> dict[str, Any]:
    """Train on this rank; rank 0 returns the job's metrics, the others an empty dict."""
    apply_env(plan.env.applied)
    rank = int(os.environ["RANK"])
    me = Rank(
        rank=rank,
        local_rank=int(os.environ["LOCAL_RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        device=torch.device("cpu"),
    )
    _setup_logging()
    device = _setup_device(plan, me.local_rank)
    me = Rank(me.rank, me.local_rank, me.world_size, device)
    dist.init_process_group(
        backend=plan.backend, device_id=device if plan.backend == "nccl" else None
    )
    try:
        return train(plan, me)
    except BaseException:
        # The launcher keeps the traceback in an error file; the rank's log should show it too.
        logging.getLogger("linkbench").exception("rank %d failed", rank)
        raise
    finally:
        dist.destroy_process_group()
