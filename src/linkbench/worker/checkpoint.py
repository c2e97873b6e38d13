"""Checkpoints of a training job through ``torch.distributed.checkpoint`` (DCP), and
continuing a killed job from its latest one.

Every ``checkpoint.every_steps`` steps (at a logging step, between timing windows) every rank
calls ``dcp.save`` into ``checkpoint/step-<N>/`` in the job directory: each rank writes its
own file (``__<rank>_0.distcp``) with what it holds. Under FSDP that is its shard of the
parameters and of the optimizer state (DTensors); under ZeRO-1 its partition of the optimizer
state, keyed by parameter name (so any number of ranks can read it back); what every rank
holds whole (DDP's model, the GradScaler, the learning-rate schedule, the step, the data
position) is written once, by DCP's de-duplication. Each rank's RNG states go under its own
key. Nothing is gathered to one rank, so a model larger than one host's memory can be
checkpointed.

A checkpoint is whole only once ``checkpoint.json`` names it: after ``dcp.save`` returns on
every rank (its ``.metadata`` is written last, after every rank's file), each rank hashes the
files it wrote, rank 0 writes ``checkpoint.json`` (the step, the directory, every file's size
and SHA-256) atomically and only then removes the previous step's directory. A job killed
while writing keeps its previous checkpoint; a failed write (a full disk) removes the new
directory. The launcher reads ``checkpoint.json`` (:func:`linkbench.files.find_checkpoint`) to
know where a ``resume=true`` run continues and that every file is whole before any worker
loads it. The time is not counted as training time.

The data position is the stream's two integers (:mod:`linkbench.parts.data`, which says why
torchdata's ``StatefulDataLoader`` is not used).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from linkbench.files import (
    CHECKPOINT_INFO_FILE,
    CHECKPOINT_METADATA,
    DAMAGED_SUFFIX,
    checkpoint_rank_files,
    checkpoint_step_dir,
    describe_file,
    read_json,
    write_json,
)
from linkbench.parts.rank import Rank
from linkbench.worker.stepper import Stepper


def _rng_key(rank: int) -> str:
    return f"rng_rank{rank}"


def _state(
    stepper: Stepper, step: int, data: dict[str, int], rng_rank: int, device: torch.device
) -> dict[str, Any]:
    """What a checkpoint holds, as DCP saves it (and as :func:`restore` loads it in place)."""
    model, optimizer = stepper.parallel.state_dicts(stepper.optimizer)
    cuda = device.type == "cuda"
    return {
        "step": step,
        "model": model,
        "optimizer": optimizer,
        "grad_scaler": stepper.scaler.state_dict(),
        "schedule": stepper.schedule.state_dict(),
        "data": dict(data),
        _rng_key(rng_rank): {
            "cpu": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if cuda else None,
        },
    }


def _first_failure(error: CheckpointException, where: Path) -> BaseException:
    """The lowest rank's error of a failed ``dcp.save`` (every rank gets every rank's): an
    OSError (a full disk, say) said as such, with the rank and the directory."""
    rank, (first, _) = min(error.failures.items(), key=lambda item: item[0])
    if isinstance(first, OSError):
        return OSError(first.errno, f"{first.strerror or first}: rank {rank} writing {where}")
    return first


def _name(job_dir: Path, where: Path, step: int, files: list[dict[str, Any] | None]) -> None:
    """checkpoint.json naming the checkpoint in ``where``: its step, directory, and every
    file's size and SHA-256 (each rank's ``files``, and DCP's ``.metadata``)."""
    described = {CHECKPOINT_METADATA: describe_file(where / CHECKPOINT_METADATA)}
    for each in files:
        described.update(each or {})
    info = {
        "step": step,
        "dir": str(where.relative_to(job_dir)),
        "world_size": len(files),
        "files": dict(sorted(described.items())),
    }
    write_json(job_dir / CHECKPOINT_INFO_FILE, info)


def save(job_dir: Path, stepper: Stepper, step: int, data: dict[str, int], me: Rank) -> None:
    """Write the checkpoint of ``step`` (collective: every rank calls it)."""
    where = checkpoint_step_dir(job_dir, step)
    if me.is_main:  # what a killed write left, named by no checkpoint.json
        shutil.rmtree(where, ignore_errors=True)
    dist.barrier()
    try:
        dcp.save(_state(stepper, step, data, me.rank, me.device), checkpoint_id=where)
        mine = {p.name: describe_file(p) for p in checkpoint_rank_files(where, me.rank)}
        files: list[dict[str, Any] | None] = [None] * me.world_size
        dist.all_gather_object(files, mine)
        if me.is_main:
            _name(job_dir, where, step, files)
    except BaseException as error:  # a checkpoint checkpoint.json does not name goes
        shutil.rmtree(where, ignore_errors=True)
        if isinstance(error, CheckpointException):
            raise _first_failure(error, where) from error
        raise
    if me.is_main:
        for old in where.parent.iterdir():
            if old != where and not old.name.endswith(DAMAGED_SUFFIX):
                shutil.rmtree(old, ignore_errors=True)
    dist.barrier()


def restore(job_dir: Path, stepper: Stepper, position: dict[str, int], me: Rank) -> int:
    """Load the job's checkpoint into the model, optimizer, scaler, schedule, the data
    ``position`` and this rank's RNG (collective); the checkpoint's step. A rank beyond the
    checkpoint's ranks takes rank 0's RNG states."""
    info = read_json(job_dir / CHECKPOINT_INFO_FILE)
    assert info is not None, "the plan found this checkpoint usable"
    rng_rank = me.rank if me.rank < int(info.get("world_size", 1)) else 0
    state = _state(stepper, 0, position, rng_rank, me.device)
    dcp.load(state, checkpoint_id=job_dir / info["dir"])
    stepper.parallel.load_state_dicts(stepper.optimizer, state["model"], state["optimizer"])
    stepper.scaler.load_state_dict(state["grad_scaler"])
    stepper.schedule.load_state_dict(state["schedule"])
    rng = state[_rng_key(rng_rank)]
    torch.set_rng_state(rng["cpu"].cpu())
    if me.device.type == "cuda" and rng["cuda"] is not None:
        torch.cuda.set_rng_state(rng["cuda"].cpu(), me.device)
    position.update(state["data"])
    return int(state["step"])
