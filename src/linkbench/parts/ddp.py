"""Wrapping a model in DistributedDataParallel, with the configured communication hook."""

from __future__ import annotations

import hydra.utils
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from linkbench.config.schema import CommHookConfig, DDPConfig


def wrap(
    model: nn.Module, ddp: DDPConfig, comm_hook: CommHookConfig, device: torch.device
) -> DistributedDataParallel:
    """DDP over the default process group; ``device_ids`` names the rank's GPU."""
    ddp_model = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=ddp.bucket_cap_mb,
        gradient_as_bucket_view=ddp.gradient_as_bucket_view,
        static_graph=ddp.static_graph,
        find_unused_parameters=ddp.find_unused_parameters,
    )
    if comm_hook.hook is not None:
        # hook: _partial_ of a function (state, bucket) -> future; state: its object or None.
        state = hydra.utils.instantiate(comm_hook.state) if comm_hook.state else None
        ddp_model.register_comm_hook(state, hydra.utils.instantiate(comm_hook.hook))
    return ddp_model
