"""A worker on an emulated link (``interconnect=emulated``): its namespace, its rendezvous
over the link, the link's measured rate (and a warning when it falls well short of the rate
set) and the check of its own sockets.

The launcher made the run's namespaces (:mod:`linkbench.link.netns`); each worker moves into
its rank's before it opens a socket, and the ranks meet at a TCPStore that rank 0 serves on
its emulated address, so the rendezvous crosses the link too (the elastic agent's own store
on the host's loopback is out of the namespaces' reach).
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from linkbench.link.bandwidth import bandwidths_gb_s
from linkbench.link.emulated import (
    PROBE_BYTES,
    PROBE_CALLS,
    STORE_PORT,
    LinkSpec,
    check_connections,
    entered,
    own_connections,
    rate_warning,
)
from linkbench.parts.rank import Rank

log = logging.getLogger("linkbench")


def store(spec: LinkSpec, rank: int, world_size: int, timeout_s: float) -> dist.TCPStore:
    """The run's rendezvous store, served by rank 0 on its emulated address."""
    return dist.TCPStore(
        spec.store_address,
        STORE_PORT,
        world_size,
        is_master=rank == 0,
        timeout=timedelta(seconds=timeout_s),
    )


def measure(me: Rank, spec: LinkSpec | None = None) -> dict[str, Any]:
    """The fastest of a few all_reduce calls of PROBE_BYTES (every rank calls it): the link's
    bus bandwidth as the job sees it, before the task runs. Where it is below what the rate
    of ``spec`` (by default the link this process entered) lets through by more than the
    allowed shortfall, ``rate_warning`` says so in a sentence, which rank 0 also logs."""
    tensor = torch.zeros(PROBE_BYTES // 4, device=me.device)
    times = []
    for call in range(PROBE_CALLS + 1):
        dist.barrier()
        started = time.perf_counter()
        dist.all_reduce(tensor)
        if me.device.type == "cuda":
            torch.cuda.synchronize(me.device)
        if call:
            times.append(time.perf_counter() - started)
    busbw = bandwidths_gb_s("all_reduce", PROBE_BYTES, min(times), me.world_size)[1]
    measured: dict[str, Any] = {
        "measured_busbw_gb_s": busbw,
        "probe_bytes": PROBE_BYTES,
        "probe_s": times,
    }
    spec = spec or entered()
    warning = rate_warning(spec, busbw) if spec is not None else None
    if warning is not None:
        measured["rate_warning"] = warning
        if me.is_main:
            log.warning("!!! %s", warning)
    return measured


def check_sockets(
    spec: LinkSpec, me: Rank, earlier: list[tuple[str, str]] | None = None
) -> dict[str, Any]:
    """This rank's own TCP connections now and ``earlier`` (read while every rank's were
    open: after the link probe), checked against the link."""
    seen = sorted(set(own_connections()) | set(earlier or []))
    return check_connections(seen, spec, me.rank)
