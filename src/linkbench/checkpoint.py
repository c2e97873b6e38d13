"""Checkpoints of a training job, and continuing a killed job from its latest one.

Every ``checkpoint.every_steps`` steps (at a logging step, between timing windows) rank 0
writes ``checkpoint.pt`` in the job directory: the model (without its DDP wrapper), the
optimizer, GradScaler and learning-rate schedule, the step, the data position (epoch and
batches taken from it) and every rank's RNG states. It goes to a temporary file that is then
renamed over the old one, so a job killed while writing keeps its previous checkpoint;
``checkpoint.json`` beside it (written the same way, after it) names the step, so the
launching process knows where a ``resume=true`` run continues without loading tensors.
The other ranks wait at a barrier meanwhile, and the time is not counted as training time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from linkbench.execution import Stepper
from linkbench.rank import Rank
from linkbench.results import read_json, replace_atomically, write_json

CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_INFO_FILE = "checkpoint.json"


def saved_step(job_dir: Path) -> int | None:
    """The step of the job's latest checkpoint, or None when it has none."""
    info = read_json(job_dir / CHECKPOINT_INFO_FILE)
    if info is None or not (job_dir / CHECKPOINT_FILE).is_file():
        return None
    return int(info["step"])


def _rng_state(device: torch.device) -> dict[str, Any]:
    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return {"cpu": torch.get_rng_state(), "cuda": cuda}


def save(job_dir: Path, stepper: Stepper, step: int, data: dict[str, int], me: Rank) -> None:
    """Write the checkpoint of ``step`` (collective: every rank calls it)."""
    rng: list[Any] = [None] * me.world_size
    dist.all_gather_object(rng, _rng_state(me.device))
    if me.is_main:
        state = {
            "step": step,
            "model": stepper.ddp_model.module.state_dict(),
            "optimizer": stepper.optimizer.state_dict(),
            "grad_scaler": stepper.scaler.state_dict(),
            "schedule": stepper.schedule.state_dict(),
            "data": dict(data),
            "rng": rng,
        }
        replace_atomically(job_dir / CHECKPOINT_FILE, lambda tmp: torch.save(state, tmp))
        write_json(job_dir / CHECKPOINT_INFO_FILE, {"step": step})
    dist.barrier()


def load(job_dir: Path, device: torch.device) -> dict[str, Any]:
    """The job's latest checkpoint, its tensors on ``device`` (where a capturable
    optimizer's learning-rate tensor must stay)."""
    return torch.load(job_dir / CHECKPOINT_FILE, map_location=device, weights_only=True)


def restore(state: dict[str, Any], stepper: Stepper, me: Rank) -> None:
    """Put a checkpoint's model, optimizer, scaler, schedule and this rank's RNG back."""
    stepper.ddp_model.module.load_state_dict(state["model"])
    stepper.optimizer.load_state_dict(state["optimizer"])
    stepper.scaler.load_state_dict(state["grad_scaler"])
    stepper.schedule.load_state_dict(state["schedule"])
    rng = state["rng"][me.rank] if me.rank < len(state["rng"]) else state["rng"][0]
    torch.set_rng_state(rng["cpu"].cpu())
    if me.device.type == "cuda" and rng["cuda"] is not None:
        torch.cuda.set_rng_state(rng["cuda"].cpu(), me.device)
