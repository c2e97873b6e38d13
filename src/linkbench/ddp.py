"""Wrapping a model in DistributedDataParallel, with the configured communication hook."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def wrap(
    model: nn.Module, ddp_cfg: dict[str, Any], device: torch.device
) -> DistributedDataParallel:
    """DDP over the default process group; ``device_ids`` names the rank's GPU."""
    ddp_model = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=ddp_cfg["bucket_cap_mb"],
        gradient_as_bucket_view=ddp_cfg["gradient_as_bucket_view"],
        static_graph=ddp_cfg["static_graph"],
        find_unused_parameters=ddp_cfg["find_unused_parameters"],
    )
    _register_hook(ddp_model, ddp_cfg)
    return ddp_model


def _register_hook(ddp_model: DistributedDataParallel, ddp_cfg: dict[str, Any]) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hook = ddp_cfg["comm_hook"]
    if hook == "none":
        return
    if hook == "fp16":
        ddp_model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook == "bf16":
        ddp_model.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=ddp_cfg["powersgd_rank"],
            start_powerSGD_iter=2,
        )
        ddp_model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        raise ValueError(f"unknown ddp.comm_hook {hook!r}")
