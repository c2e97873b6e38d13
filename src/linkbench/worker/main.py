"""One rank of a job: its environment, logging, device, process group and hardware record.

:func:`worker_main` is the function the elastic launcher starts in every worker process. It
applies the job's interconnect variables (and, for NCCL, the debug variables that make NCCL
log its transports to ``logs/nccl.rank<N>.log``) before anything touches NCCL, so they reach
this job's workers and nothing else. Then it runs the job's task.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from linkbench.config.plan import RunPlan
from linkbench.files import HARDWARE_FILE, disk_full, nccl_log, write_json
from linkbench.link.emulated import enter, own_connections
from linkbench.link.interconnect import apply_env, nccl_environment
from linkbench.link.topology import gpu_topology, link_warnings, nvidia_smi_topology, versions
from linkbench.link.transport import nccl_debug_env
from linkbench.parts.rank import Rank
from linkbench.stop import (
    STOP_SIGNALS,
    peer_left,
    record_failure,
    stop_on_sigterm,
    stop_quietly,
    stops_held,
    watch_launcher,
)
from linkbench.worker import heartbeat, phases
from linkbench.worker.board import Board
from linkbench.worker.emulated import (
    check_sockets,
    measure,
    measure_nodes,
    measure_uplinks,
    store,
)

log = logging.getLogger("linkbench")


def _setup_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
        force=True,
    )


def _setup_device(plan: RunPlan, local_rank: int) -> torch.device:
    if plan.device_type == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    if "OMP_NUM_THREADS" not in os.environ:
        # Share the cores between the ranks instead of oversubscribing them (torchrun sets
        # OMP_NUM_THREADS=1 instead, which leaves cores idle with few ranks).
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        torch.set_num_threads(max(1, (cores or 1) // plan.nproc_per_node))
    return torch.device("cpu")


def _gpu_uuid(device: torch.device) -> str | None:
    if device.type != "cuda":
        return None
    uuid = str(torch.cuda.get_device_properties(device).uuid)
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


class HardwareDescription:
    """Rank 0's record of the GPUs of every rank on its host (hardware.json), gathered in a
    thread while the task runs: NVML and ``nvidia-smi topo -m`` take seconds the first step
    need not wait for. Every rank takes part in the collective gather at construction."""

    def __init__(self, plan: RunPlan, me: Rank) -> None:
        self.plan = plan
        mine = {"host": socket.gethostname(), "uuid": _gpu_uuid(me.device)}
        everyone: list[Any] = [None] * me.world_size
        dist.all_gather_object(everyone, mine)
        self._result: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        if me.is_main:
            self._thread = threading.Thread(target=self._describe, args=(everyone, mine["host"]))
            self._thread.start()

    def _describe(self, everyone: list[dict[str, Any]], host: str) -> None:
        uuids = [p["uuid"] for p in everyone if p["host"] == host and p["uuid"]]
        topology = gpu_topology(uuids) if uuids else {"available": False, "reason": "no GPU in use"}
        self._result = {
            "versions": versions(),
            "hosts": sorted({p["host"] for p in everyone}),
            "topology": topology,
            "nvidia_smi_topo": nvidia_smi_topology() if uuids else None,
            "warnings": link_warnings(topology, str(self.plan.config.interconnect.name)),
        }

    def finish(self) -> dict[str, Any] | None:
        """Rank 0: the record, written to hardware.json, its warnings logged; others None."""
        if self._thread is None:
            return None
        self._thread.join()
        for warning in self._result["warnings"]:
            log.warning("!!! %s", warning)
        write_json(Path(self.plan.job_dir) / HARDWARE_FILE, self._result)
        return self._result


# How readily the kernel's out-of-memory killer picks a rank (oom_score_adj, -1000 to 1000).
# It kills the process of the highest badness, its memory plus adj/1000 of the memory it may
# use (the cgroup's limit, or the machine's): at 1000 a rank scores above any process of
# adjustment 0 under the same limit, the launcher however large its torch (Linux's
# mm/oom_kill.c, oom_badness()).
OOM_SCORE_ADJ = 1000


def _first_to_go_when_memory_runs_out() -> None:
    """Ask the kernel to end this rank, rather than its launcher (which then says what
    happened: :mod:`linkbench.launcher.memory`) or another program, when memory runs out."""
    with contextlib.suppress(OSError):  # not Linux, or not allowed: the kernel chooses
        Path("/proc/self/oom_score_adj").write_text(str(OOM_SCORE_ADJ))


def worker_main(plan: RunPlan) -> dict[str, Any]:
    """Run the job's task on this rank; rank 0 returns the job's results, the others {}."""
    phases.reset()
    phases.mark("process_start")
    _first_to_go_when_memory_runs_out()
    apply_env(plan.env.applied)
    rank = int(os.environ["RANK"])
    if plan.link is not None:  # before this process opens a socket
        enter(plan.link, int(os.environ["LOCAL_RANK"]))
    if plan.backend == "nccl":
        log_file = nccl_log(plan.log_dir, rank)
        apply_env(nccl_debug_env(str(log_file), dict(os.environ)))
    if plan.in_place:  # Hydra has set up this process's logging; no launcher made the logs dir
        plan.log_dir.mkdir(parents=True, exist_ok=True)
    else:
        _setup_logging()
    stop_on_sigterm()
    watch_launcher()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = _setup_device(plan, local_rank)
    me = Rank(rank, local_rank, int(os.environ["WORLD_SIZE"]), device, plan.layout)
    timeout_s = plan.config.dist_timeout_s
    world: dict[str, Any] = {}  # the rendezvous: the elastic agent's, or the link's own
    if plan.link is not None:
        link_store = store(plan.link, rank, me.world_size, timeout_s)
        world = {"store": link_store, "rank": rank, "world_size": me.world_size}
    dist.init_process_group(
        backend=plan.backend,
        device_id=device if plan.backend == "nccl" else None,
        timeout=timedelta(seconds=timeout_s),
        **world,
    )
    phases.mark("rendezvous")
    board = hardware = None
    beat = heartbeat.start(rank, me.world_size, world.get("store"))
    try:
        hardware = HardwareDescription(plan, me)
        board = Board(plan) if me.is_main else None
        if plan.link is not None:
            phases.mark("set_up")
            # One rank has no peer: no probe, so no figure for a link that is not there (one
            # node of several ranks probes the path inside it, the projection's --inside).
            link = (
                {**measure(me), **measure_nodes(me, plan.link), **measure_uplinks(me, plan.link)}
                if me.world_size > 1
                else {}
            )
            opened = own_connections()  # every rank's connections are open now
            phases.mark("link_probe")
        task_started_at = time.time()
        out = plan.runtime.task.run(plan, me, board)
        phases.mark("task")
        if me.is_main:
            if plan.link is not None and link is not None:
                sockets = check_sockets(plan.link, me, opened)
                out["link"] = {
                    **plan.link.settings(),
                    **link,
                    **out.get("link", {}),
                    "sockets": sockets,
                }
            out["worker_nccl_env"] = nccl_environment()
            timeline = out.setdefault("timeline", {})
            timeline.update(task_started_at=task_started_at, task_ended_at=time.time())
            timeline["phases"] = phases.marks()
        return out
    except BaseException as error:
        # The launcher keeps the traceback in an error file; the rank's log should show it too.
        # A stop signal arriving now (the launcher stops the other ranks when one fails) must
        # not cut the record short.
        full = disk_full(plan.job_dir, error)
        hung = beat.unresponsive() if beat is not None and heartbeat.timed_out(error) else {}
        with stops_held():
            record_failure(plan.log_dir, rank, error, full, hung, timeout_s)
        if isinstance(error, tuple(STOP_SIGNALS)):
            log.warning("rank %d stopped: %s", rank, error or "interrupted")
            if not plan.in_place:  # a stop is no error of this rank's: exit without traceback
                raise SystemExit(128 + STOP_SIGNALS[type(error)]) from None
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        if peer_left(error):  # one line: the rank that left says why (its traceback is kept)
            log.error("rank %d stopped: another rank left the job (%s)", rank, first)
        elif hung:  # one line: the rank that stopped responding is the news
            named = "; ".join(f"rank {r}: {why}" for r, why in hung.items())
            log.error("rank %d stopped: a collective timed out after dist_timeout_s=%g s "
                      "waiting for %s", rank, timeout_s, named)  # fmt: skip
        elif full:
            log.error("rank %d stopped: no space left in %s (%s)", rank, plan.job_dir, first)
        else:
            log.exception("rank %d failed", rank)
        if not plan.in_place:  # recorded and said: a stop signal now only ends the rank
            stop_quietly()
        raise
    finally:
        if beat is not None:
            beat.stop()
        described = hardware.finish() if hardware is not None else None
        if board is not None:
            if described is not None:
                board.hardware(described)
            board.close()
        dist.destroy_process_group()
