"""Failed and stopped ranks: what each worker records, and which rank failed first.

When one rank fails, the others fail soon after (a collective loses its peer, or the
launcher stops them), so "which rank failed" needs an order. Every worker that raises writes
``logs/failure.rank<N>.json`` with the time and its error; a rank killed from outside (out of
memory, ``kill -9``) writes nothing and is known by its signal. The first to fail is a rank
killed by a signal that the launcher did not send (it sends SIGTERM, and SIGKILL only to a
rank still alive after its grace period), else the rank whose recorded failure came first.

The records are written by :func:`linkbench.stop.record_failure`.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from linkbench.files import failure_file, read_json

# The launcher stops the remaining workers with these, and SIGKILLs the ones still alive
# this many seconds later (torch.distributed.elastic's default shutdown timeout).
LAUNCHER_SIGNALS = {signal.SIGTERM, signal.SIGINT}
LAUNCHER_GRACE_S = 30.0


def first_failure(
    failures: dict[int, Any], log_dir: Path, world_size: int, ended_at: float
) -> tuple[int, str]:
    """(rank, its error) of the rank that failed first.

    From the launcher's failures (rank -> ProcessFailure with ``exitcode``; it may list only
    the ranks it saw end), every rank's failure file, and the time the launcher gave up
    (``ended_at``, seconds since the epoch). A rank killed from outside leaves no file: it
    failed first unless the launcher's grace period passed, in which case the launcher may
    have killed it itself. A rank the launcher did not list is suspected only where the first
    error a rank recorded is that a peer left (``peer_left``): after an error of a rank's
    own, an unlisted rank ended well or was stopped by the launcher."""
    recorded = _recorded(log_dir, world_size)
    first_own = _first_own(recorded)
    if first_own is not None and (hung := stopped_responding(recorded[first_own], first_own)):
        return hung
    grace_passed = (
        first_own is not None and ended_at - recorded[first_own]["time"] >= LAUNCHER_GRACE_S
    )
    # A record from before peer_left was recorded counts as one (the old reading).
    own_error = first_own is not None and not recorded[first_own].get("peer_left", True)
    if not grace_passed:
        for rank in range(world_size):
            failure = failures.get(rank)
            signum = -failure.exitcode if failure is not None else 0
            if signum > 0 and signum not in LAUNCHER_SIGNALS:
                return rank, f"killed by {signal.Signals(signum).name} (exit code {-signum})"
            if rank in recorded or signum in LAUNCHER_SIGNALS or (failure is None and own_error):
                continue
            if failure is not None and failure.exitcode > 0:
                return rank, f"exit code {failure.exitcode} before it could record an error"
            return rank, "it ended without recording an error, killed from outside"
    if first_own is not None:
        return first_own, recorded[first_own]["error"]
    rank = min(failures, default=0)
    return rank, f"exit code {failures[rank].exitcode}" if failures else "no rank said why"


def stopped_responding(record: dict[str, Any], waiter: int) -> tuple[int, str] | None:
    """(rank, what happened) where ``waiter``'s recorded failure is a collective's timeout
    while it waited for ranks that had stopped responding (their heartbeats): the first of
    those is the rank the job failed for."""
    waited = {int(r): why for r, why in (record.get("waited_for") or {}).items()}
    if not waited:
        return None
    rank = min(waited)
    others = sorted(set(waited) - {rank})
    also = f" (rank(s) {', '.join(map(str, others))} too)" if others else ""
    return rank, (
        f"it stopped responding{also}: {waited[rank]}. Rank {waiter} waited for it in a "
        f"collective until its timeout fired (dist_timeout_s={record.get('timeout_s'):g} s): "
        "find in this rank's log what it was doing; raise dist_timeout_s only if it was "
        "merely slow"
    )


def first_recorded_failure(log_dir: Path, world_size: int) -> tuple[int, str] | None:
    """(rank, error) of the earliest failure a rank recorded itself, if any did. Under an
    outside launcher only this node's records may be visible, so silence proves nothing."""
    recorded = _recorded(log_dir, world_size)
    rank = _first_own(recorded)
    if rank is None:
        return None
    return stopped_responding(recorded[rank], rank) or (rank, recorded[rank]["error"])


def ran_out_of_space(log_dir: Path, world_size: int) -> bool:
    """Whether a rank recorded that it failed for want of space in the job's directory."""
    return any(r.get("no_space") for r in _recorded(log_dir, world_size).values())


def _first_own(recorded: dict[int, dict[str, Any]]) -> int | None:
    """The rank whose own failure (not a stop) was recorded first, if any."""
    own = [rank for rank, data in recorded.items() if not data["stopped"]]
    return min(own, key=lambda rank: recorded[rank]["time"], default=None)


def _recorded(log_dir: Path, world_size: int) -> dict[int, dict[str, Any]]:
    records = ((rank, read_json(failure_file(log_dir, rank))) for rank in range(world_size))
    return {rank: data for rank, data in records if data}
