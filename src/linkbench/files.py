"""The files a job leaves in its output directory (result, metrics, hardware, manifest,
failure records), and the overrides they record. Used by every process.

Writes are atomic (a temporary file renamed into place), so a reader never sees half a file
and a crash never destroys the last good copy.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULT_FILE = "result.json"
METRICS_FILE = "metrics.json"
HARDWARE_FILE = "hardware.json"
MANIFEST_FILE = "manifest.json"
RERUN_FILE = "rerun.yaml"
TRACE_DIR = "traces"
LOG_DIR = "logs"  # a job's logs: each rank's stdout, stderr and NCCL log
CHECKPOINT_DIR = "checkpoint"  # one DCP directory per step: checkpoint/step-<N>/
CHECKPOINT_INFO_FILE = "checkpoint.json"
COMPILE_CACHE_DIR = ".compile_cache"  # in a sweep's directory, shared by its jobs
CHECKPOINT_METADATA = ".metadata"  # torch.distributed.checkpoint's, written last
COLLECTIVES_CSV = "collectives.csv"  # task=allreduce: one row per collective and size
LINKS_CSV = "links.csv"  # task=links: one row per copy
SUMMARY_CSV = "summary.csv"  # a sweep's: one row per configuration
SUMMARY_MD = "summary.md"
ROUNDS_FILE = "rounds.json"  # an adaptive sweep's: its design and every round's verdicts
# TensorBoard event files: every writer's, and the launcher's once-per-job record's (its own
# suffix, so that a job run again replaces the record of its earlier attempt).
EVENTS_GLOB = "events.out.tfevents.*"
RECORD_EVENTS_SUFFIX = ".record"
SWEEP_RUN = "_summary"  # a sweep's own TensorBoard runs, beside one run per job
MULTIRUN_FILE = "multirun.yaml"  # Hydra's record of a sweep's config, in its directory
# A sweep's plots (a metric's own plot is named in its entry of linkbench.metrics' table).
RATIOS_PLOT = "ratios.png"
STEP_BREAKDOWN_PLOT = "step_breakdown.png"
BUSBW_PLOT = "busbw_vs_size.png"
LINK_RATE_PLOT = "link_rate.png"
TRACE_FILES = "rank*.json.gz"  # every rank's trace, in TRACE_DIR
NCCL_LOGS = "nccl.rank*.log"
RANK_LOGS = "rank*.std*.log"
# The profiler range around each injected communication delay (debug.comm_delay_ms,
# linkbench.parts.delay), which the trace analysis counts as communication.
COMM_DELAY_RANGE = "linkbench:comm_delay"


def replace_atomically(path: str | os.PathLike, write: Callable[[Path], Any]) -> None:
    """``write(tmp)`` a temporary file beside ``path``, then rename it over ``path``; a write
    that fails (a full disk, say) leaves no temporary file behind."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, data: Mapping[str, Any]) -> None:
    text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
    replace_atomically(path, lambda tmp: tmp.write_text(text))


def read_json(path: str | os.PathLike) -> dict[str, Any] | None:
    """The file's object, or None when it does not exist or is not valid JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class DamagedRecord(ValueError):
    """A record a sweep wrote is there but cannot be read; the message says which and what
    to do."""


def read_rounds(sweep_dir: str | os.PathLike) -> dict[str, Any] | None:
    """An adaptive sweep's rounds.json, or None where the sweep wrote none (fixed rounds);
    DamagedRecord where it is there and cut short or not a JSON object, since read as
    absent it would turn an adaptive sweep's intervals into fixed rounds' without a word."""
    path = Path(sweep_dir) / ROUNDS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        why = f"cut short or not JSON ({error.msg} at line {error.lineno})"
    else:
        if isinstance(record, dict):
            return record
        why = "not a JSON object"
    raise DamagedRecord(
        f"{path} is {why}, so this adaptive sweep's design and verdicts cannot be read; "
        "restore it from a copy, or delete it to read the sweep as fixed rounds (its "
        "intervals then ignore the looks it took)."
    )


def trace_path(job_dir: str | os.PathLike, rank: int) -> Path:
    """Where rank ``rank`` of a job writes its trace (one of :data:`TRACE_FILES`)."""
    return Path(job_dir) / TRACE_DIR / f"rank{rank}.json.gz"


def links_plot(job_dir: Path, kind: str) -> Path:
    """task=links: the bandwidth matrix of one kind of copy."""
    return job_dir / f"links_{kind}.png"


def checkpoint_step_dir(job_dir: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` is written (a torch.distributed.checkpoint directory)."""
    return job_dir / CHECKPOINT_DIR / f"step-{step}"


def checkpoint_rank_files(step_dir: Path, rank: int) -> list[Path]:
    """The files rank ``rank`` wrote into a checkpoint (FileSystemWriter's ``__<rank>_<n>``)."""
    return sorted(step_dir.glob(f"__{rank}_*.distcp"))


def nccl_log(log_dir: Path, rank: int) -> Path:
    """Where rank ``rank``'s NCCL writes its log (``NCCL_DEBUG_FILE``)."""
    return log_dir / f"nccl.rank{rank}.log"


def rank_log(log_dir: Path, rank: int, stream: str) -> Path:
    """Rank ``rank``'s ``stdout`` or ``stderr``, as the launcher redirects them."""
    return log_dir / f"rank{rank}.{stream}.log"


def rank_error_file(log_dir: Path, rank: int) -> Path:
    """Where torch's elastic agent records rank ``rank``'s uncaught error."""
    return log_dir / f"rank{rank}.error.json"


def failure_file(log_dir: Path, rank: int) -> Path:
    """Where a worker records its own failure (:mod:`linkbench.stop`)."""
    return log_dir / f"failure.rank{rank}.json"


DAMAGED_SUFFIX = ".damaged"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def describe_file(path: Path) -> dict[str, Any]:
    """A file's size and SHA-256, as checkpoint.json records them."""
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


@dataclass(frozen=True)
class CheckpointFound:
    """A job directory's checkpoint as :func:`find_checkpoint` found it: the step it continues
    from, or why it cannot be used and what :func:`set_aside` moves out of the way (a damaged
    one), or nothing (no checkpoint)."""

    step: int | None = None
    problem: str | None = None
    damaged: Path | None = None


def find_checkpoint(job_dir: Path) -> CheckpointFound:
    """The job's checkpoint, read without changing anything. One with a file missing, or
    whose size or SHA-256 differs from what checkpoint.json recorded, is damaged: the
    launcher sets it aside (``step-<N>.damaged``, by one process of the job) and the job
    starts over."""
    record = job_dir / CHECKPOINT_INFO_FILE
    info = read_json(record)
    if info is None:
        if not record.exists():
            return CheckpointFound()
        return CheckpointFound(
            problem=f"{record} cannot be read (cut short, or not JSON), so no checkpoint can be "
            f"trusted; it is moved to {_aside(record).name} and the job starts over from step 0",
            damaged=record,
        )
    if "files" not in info:  # one torch.save file, checkpoint.pt, before checkpoints by DCP
        return CheckpointFound(
            problem=f"{record} names a checkpoint of an older linkbench, which this one cannot "
            "read; the job starts over from step 0"
        )
    where = job_dir / info["dir"]
    for name, recorded in info["files"].items():
        path = where / name
        found = path.stat().st_size if path.is_file() else None
        if found == recorded["bytes"] and _sha256(path) == recorded["sha256"]:
            continue
        if found is None:
            what = f"missing, where checkpoint.json recorded {recorded['bytes']:,} bytes"
        elif found != recorded["bytes"]:
            what = f"{found:,} bytes, where checkpoint.json recorded {recorded['bytes']:,}"
        else:
            what = (
                f"its {found:,} bytes as checkpoint.json recorded, but their SHA-256 is not "
                "the one it recorded: the contents changed"
            )
        return CheckpointFound(
            problem=f"{where} is damaged ({name}: {what}); it is moved to {_aside(where).name} "
            "and the job starts over from step 0",
            damaged=where if where.is_dir() else None,
        )
    return CheckpointFound(step=int(info["step"]))


def _aside(path: Path) -> Path:
    return path.with_name(path.name + DAMAGED_SUFFIX)


def set_aside(found: CheckpointFound) -> None:
    """Move a damaged checkpoint :func:`find_checkpoint` found out of the job's way (an
    earlier one set aside under the same name is replaced)."""
    if found.damaged is None or not found.damaged.exists():
        return
    aside = _aside(found.damaged)
    if aside.is_dir():
        shutil.rmtree(aside, ignore_errors=True)
    found.damaged.replace(aside)


FULL_BELOW_BYTES = 1 << 20  # a disk with less free space is taken as full


def disk_full(directory: str | Path, error: BaseException) -> bool:
    """Whether ``error`` says no space was left (itself or what it was raised from), or the
    disk holding ``directory`` is (all but) full: torch.save says "iostream error", not
    ENOSPC."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno == errno.ENOSPC:
            return True
        cause = cause.__cause__
    try:
        return shutil.disk_usage(directory).free < FULL_BELOW_BYTES
    except OSError:
        return False
