"""Wrapping a model in DistributedDataParallel, with the configured communication hook.

With ``debug.comm_delay_ms`` each bucket's collective waits a known time first
(:class:`linkbench.parts.delay.CommDelay`). With ``nvtx=true`` every bucket's all-reduce is
launched inside an NVTX range (``allreduce bucket N``), around the configured hook or DDP's
plain all-reduce hook: Nsight Systems then shows where each bucket's communication starts.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import hydra.utils
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

from linkbench.config.strategies import DDPStrategy
from linkbench.parts.delay import CommDelay


def wrap(
    model: nn.Module,
    ddp: DDPStrategy,
    device: torch.device,
    nvtx: bool = False,
    comm_delay: CommDelay | None = None,
) -> DistributedDataParallel:
    """DDP over the default process group; ``device_ids`` names the rank's GPU.
    ``comm_delay`` delays each bucket's collective (``debug.comm_delay_ms``); the hook is
    the strategy's (``strategy/comm_hook``)."""
    ddp_model = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        bucket_cap_mb=ddp.bucket_cap_mb,
        gradient_as_bucket_view=ddp.gradient_as_bucket_view,
        static_graph=ddp.static_graph,
        find_unused_parameters=ddp.find_unused_parameters,
    )
    hook: Callable[..., Any] | None = None
    state = None
    comm_hook = ddp.comm_hook
    if comm_hook.hook is not None:
        # hook: _partial_ of a function (state, bucket) -> future; state: its object or None.
        state = hydra.utils.instantiate(comm_hook.state) if comm_hook.state else None
        hook = hydra.utils.instantiate(comm_hook.hook)
        if isinstance(hook, functools.partial):  # DDP reads the hook's __name__ and __qualname__
            functools.update_wrapper(hook, hook.func)
    if comm_delay is not None:
        hook = comm_delay.wrap(hook or default_hooks.allreduce_hook)
    if nvtx:
        hook = _in_nvtx_range(hook or default_hooks.allreduce_hook)
    if hook is not None:
        ddp_model.register_comm_hook(state, hook)
    return ddp_model


def _in_nvtx_range(hook: Callable[..., Any]) -> Callable[..., Any]:
    # No annotations: DDP checks them against its own types.
    def hook_in_range(state, bucket):  # type: ignore[no-untyped-def]
        with torch.cuda.nvtx.range(f"allreduce bucket {bucket.index()}"):
            return hook(state, bucket)

    hook_in_range.__qualname__ = f"nvtx({getattr(hook, '__qualname__', 'hook')})"
    return hook_in_range
