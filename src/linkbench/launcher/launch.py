"""Starting a job's world of worker processes with PyTorch's elastic launcher.

Every Hydra job gets its own fresh world: ``nproc_per_node`` processes, a c10d rendezvous on
localhost with a free port, no restarts. Workers start with the forkserver method from a
server that has imported torch and linkbench once per sweep (it never touches CUDA), so
a job does not pay a torch import per rank (benchmarks/RESULTS.md has the time it saves);
the server starts where the job begins (:mod:`linkbench.launcher.forkserver`).
The command line is never re-run per rank. Each rank's stdout and stderr go to
``<job>/logs/rank<N>.std{out,err}.log``; rank 0's are also shown on the console.

Under an outside launcher (torchrun, or SLURM tasks through submitit) this process is one
rank of a world already started: :func:`launch` runs the worker in place instead.
"""

from __future__ import annotations

import errno
import json
import logging
import multiprocessing
import os
import uuid
from pathlib import Path
from typing import Any

from hydra.types import RunMode
from torch.distributed import TCPStore
from torch.distributed.elastic.multiprocessing import Std
from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs
from torch.distributed.launcher.api import LaunchConfig, elastic_launch

from linkbench.config.overrides import sets
from linkbench.config.plan import RunPlan
from linkbench.errors import ConfigError
from linkbench.files import disk_full, rank_error_file, rank_log
from linkbench.launcher import interrupt
from linkbench.launcher.forkserver import start as start_forkserver
from linkbench.stop import LAUNCHER_PID
from linkbench.worker.main import worker_main


class JobLogsSpecs(LogsSpecs):
    """Flat per-rank log files in one folder; rank 0 teed to the console (unless None)."""

    def __init__(self, log_dir: Path, console_rank: int | None = 0) -> None:
        tee = {} if console_rank is None else {console_rank: Std.ALL}
        super().__init__(str(log_dir), redirects=Std.ALL, tee=tee)
        self.log_dir = log_dir
        self.console_rank = console_rank

    @property
    def root_log_dir(self) -> str:
        return str(self.log_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        # The elastic agent's last step before it starts the workers, in the main thread.
        interrupt.raise_if_lost()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        _keep_previous_attempt(self.log_dir)
        ranks = range(len(envs))
        stdouts = {r: str(rank_log(self.log_dir, r, "stdout")) for r in ranks}
        stderrs = {r: str(rank_log(self.log_dir, r, "stderr")) for r in ranks}
        errors = {r: str(rank_error_file(self.log_dir, r)) for r in ranks}
        for r in ranks:  # the previous attempt's error files were moved aside above
            envs[r]["TORCHELASTIC_ERROR_FILE"] = errors[r]
        shown = {r for r in ranks if r == self.console_rank}
        return LogsDest(
            stdouts=stdouts,
            stderrs=stderrs,
            tee_stdouts={r: stdouts[r] for r in shown},
            tee_stderrs={r: stderrs[r] for r in shown},
            error_files=errors,
            filtered_stdout=os.devnull,
            filtered_stderr=os.devnull,
        )


def _keep_previous_attempt(log_dir: Path) -> None:
    """Move the files an earlier attempt of this run left (a resumed job's killed run) into
    ``previous<N>/``, so the console, the failure records and the NCCL logs are this one's."""
    files = [p for p in log_dir.iterdir() if p.is_file()]
    if not files:
        return
    attempt = 1
    while (log_dir / f"previous{attempt}").exists():
        attempt += 1
    keep = log_dir / f"previous{attempt}"
    keep.mkdir()
    for path in files:
        path.rename(keep / path.name)


STANDARD_START_METHODS = (None, "fork", "spawn", "forkserver")


def launch(plan: RunPlan, show_rank0: bool = True) -> dict[int, Any]:
    """Run :func:`worker_main` on every rank; returns {rank: return value}.

    Raises ``ChildFailedError`` when a worker fails; the launcher then stops the others.
    Under an outside launcher (``plan.in_place``) this process is one rank: it runs
    :func:`worker_main` itself and returns {its rank: its return value}.
    """
    if plan.in_place:
        return {int(os.environ["RANK"]): worker_main(plan)}
    # linkbench reports a failed worker itself, naming its rank and log file; the launcher's
    # own traceback of that event is about its internals.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.WARNING)
    for name in ("api", "errors"):  # its own trace of a failed worker, or of its error file
        logging.getLogger(f"torch.distributed.elastic.multiprocessing.{name}").setLevel(
            logging.CRITICAL
        )
    logging.getLogger("torch.multiprocessing.spawn").setLevel(logging.ERROR)
    store = TCPStore("localhost", 0, is_master=True, multi_tenant=True)
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=plan.nproc_per_node,
        run_id=f"linkbench-{uuid.uuid4().hex[:8]}",
        # One node, one agent: a static rendezvous on a store this process holds, at a port
        # it was given (the handler's own store joins it: multi_tenant). The dynamic (c10d)
        # one first waits a random 0-0.3 s, to spread many nodes' agents.
        rdzv_backend="static",
        rdzv_endpoint=f"localhost:{store.port}",
        rdzv_configs={"rank": 0},
        max_restarts=0,
        monitor_interval=0.1,
        start_method="forkserver",
        log_line_prefix_template="[rank${rank}] ",
        logs_specs=JobLogsSpecs(plan.log_dir, console_rank=0 if show_rank0 else None),
    )
    start_forkserver()  # once per process: started already where the job began
    if multiprocessing.get_start_method(allow_none=True) not in STANDARD_START_METHODS:
        # A job inside a joblib (loky) worker: the forkserver's children would be told to
        # use that process's default, 'loky', which they cannot know, and fail at start.
        multiprocessing.set_start_method("forkserver", force=True)
    saved = dict(os.environ)
    os.environ[LAUNCHER_PID] = str(os.getpid())  # workers end themselves if it is killed
    try:
        return elastic_launch(config, worker_main)(plan)
    except json.JSONDecodeError as error:
        # The elastic agent reads each failed rank's error file; a full disk leaves it empty.
        if disk_full(plan.log_dir, error):
            for rank in range(plan.nproc_per_node):  # an empty file records nothing
                empty = rank_error_file(plan.log_dir, rank)
                if empty.is_file() and empty.stat().st_size == 0:
                    empty.unlink()
            raise OSError(errno.ENOSPC, f"no space left in {plan.log_dir}") from error
        raise
    finally:
        interrupt.listen()  # the agent left its own SIGINT handler in place
        # The launcher writes TORCHELASTIC_* variables into this process; the next job of a
        # sweep must start from the environment this one started from.
        os.environ.clear()
        os.environ.update(saved)


def export_slurm_world() -> None:
    """In a submitit job of several tasks (one per GPU), set torch's RANK, WORLD_SIZE,
    MASTER_ADDR... from SLURM's variables, so every task joins the job's world as a rank."""
    if not os.environ.get("SUBMITIT_EXECUTOR"):
        return
    from submitit import JobEnvironment
    from submitit.helpers import TorchDistributedEnvironment

    if JobEnvironment().num_tasks > 1:
        TorchDistributedEnvironment().export(set_cuda_visible_devices=False)


def check_outside_launch(hydra_cfg: Any, environ: dict[str, str]) -> None:
    """Under torchrun every rank runs run.py: they must agree on one job and its directory."""
    if "TORCHELASTIC_RUN_ID" not in environ:
        return  # SLURM tasks of a submitit job share the directory Hydra gave the job
    if hydra_cfg.mode == RunMode.MULTIRUN:
        raise ConfigError(
            "-m under torchrun would run the whole sweep in every rank; start one torchrun "
            "per job, or sweep with hydra/launcher=submitit_slurm."
        )
    if not sets(list(hydra_cfg.overrides.hydra), "hydra.run.dir"):
        raise ConfigError(
            "under torchrun every rank runs run.py and needs the same output directory; "
            "add hydra.run.dir=DIR."
        )
