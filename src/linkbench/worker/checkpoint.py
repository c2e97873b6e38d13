"""Checkpoints of a training job, and continuing a killed job from its latest one.

Every ``checkpoint.every_steps`` steps (at a logging step, between timing windows) rank 0
writes ``checkpoint.pt`` in the job directory: the model (without its DDP wrapper) and the
optimizer, whole, as the strategy gives them (``Parallel.state_dicts``), the GradScaler and
learning-rate schedule, the step, the data position (epoch and batches taken from it) and
every rank's RNG states. It goes to a temporary file that is then
renamed over the old one, so a job killed while writing keeps its previous checkpoint;
``checkpoint.json`` beside it (written the same way, after it) names the step, the file's
size and its SHA-256, so the launching process knows where a ``resume=true`` run continues
and that the file is whole (:func:`usable_checkpoint`) before any worker loads it.
The other ranks wait at a barrier meanwhile, and the time is not counted as training time.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from linkbench.files import (
    CHECKPOINT_FILE,
    CHECKPOINT_INFO_FILE,
    read_json,
    replace_atomically,
    write_json,
)
from linkbench.parts.rank import Rank
from linkbench.worker.stepper import Stepper

DAMAGED_SUFFIX = ".damaged"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            digest.update(chunk)
    return digest.hexdigest()


def usable_checkpoint(job_dir: Path, move_aside: bool = True) -> tuple[int | None, str | None]:
    """(step of the job's checkpoint, None), or (None, why it cannot be used), or (None, None)
    when there is none. A checkpoint whose size or SHA-256 differs from what checkpoint.json
    recorded is damaged: it is moved aside (``checkpoint.pt.damaged``; by one process of the
    job only, ``move_aside``) and the job starts over."""
    info = read_json(job_dir / CHECKPOINT_INFO_FILE)
    path = job_dir / CHECKPOINT_FILE
    if info is None or not path.is_file():
        return None, None
    size = path.stat().st_size
    if size != info.get("bytes") or _sha256(path) != info.get("sha256"):
        aside = path.with_name(path.name + DAMAGED_SUFFIX)
        if move_aside:
            path.replace(aside)
        return None, (
            f"{path} is damaged ({size:,} bytes, checkpoint.json recorded "
            f"{info.get('bytes', 0):,} and its SHA-256); it was moved to {aside.name} and the "
            "job starts over from step 0"
        )
    return int(info["step"]), None


def _rng_state(device: torch.device) -> dict[str, Any]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {"cpu": torch.get_rng_state(), "cuda": cuda}


def save(job_dir: Path, stepper: Stepper, step: int, data: dict[str, int], me: Rank) -> None:
    """Write the checkpoint of ``step`` (collective: every rank calls it)."""
    rng: list[Any] = [None] * me.world_size
    dist.all_gather_object(rng, _rng_state(me.device))
    model, optimizer = stepper.parallel.state_dicts(stepper.optimizer)
    if me.is_main:
        state = {
            "step": step,
            "model": model,
            "optimizer": optimizer,
            "grad_scaler": stepper.scaler.state_dict(),
            "schedule": stepper.schedule.state_dict(),
            "data": dict(data),
            "rng": rng,
        }
        path = job_dir / CHECKPOINT_FILE
        replace_atomically(path, lambda tmp: torch.save(state, tmp))
        info = {"step": step, "bytes": path.stat().st_size, "sha256": _sha256(path)}
        write_json(job_dir / CHECKPOINT_INFO_FILE, info)
    dist.barrier()


def load(job_dir: Path, device: torch.device) -> dict[str, Any]:
    """The job's latest checkpoint, its tensors on ``device`` (where a capturable
    optimizer's learning-rate tensor must stay)."""
    return torch.load(job_dir / CHECKPOINT_FILE, map_location=device, weights_only=True)


def restore(state: dict[str, Any], stepper: Stepper, me: Rank) -> None:
    """Put a checkpoint's model, optimizer, scaler, schedule and this rank's RNG back."""
    stepper.parallel.load_state_dicts(stepper.optimizer, state["model"], state["optimizer"])
    stepper.scaler.load_state_dict(state["grad_scaler"])
    stepper.schedule.load_state_dict(state["schedule"])
    rng = state["rng"][me.rank] if me.rank < len(state["rng"]) else state["rng"][0]
    torch.set_rng_state(rng["cpu"].cpu())
    if me.device.type == "cuda" and rng["cuda"] is not None:
        torch.cuda.set_rng_state(rng["cuda"].cpu(), me.device)
