"""The optimizer named by ``optimizer._target_`` and its learning-rate schedule.

The optimizer is ``_target_(params, lr=..., weight_decay=..., **kwargs)`` (Hydra's
``instantiate`` with ``_partial_``), with PyTorch's fused kernels on GPU where the class has
them and they are safe, and a capturable learning-rate tensor for CUDA graphs.
"""

from __future__ import annotations

import inspect
from typing import Any

import hydra.utils
import torch
from torch import nn

from linkbench.config.scaling import LrSchedule
from linkbench.config.schema import OptimizerConfig, StrategyName


def build_optimizer(
    model: nn.Module,
    optimizer: OptimizerConfig,
    lr: float,
    weight_decay: float,
    device: torch.device,
    grad_scaler: bool,
    capturable: bool = False,
    strategy: StrategyName = StrategyName.ddp,
) -> torch.optim.Optimizer:
    """The configured optimizer at ``lr``, fused on GPU where that is safe.

    SGD is not fused under a GradScaler: fused SGD advances its momentum on the steps the
    scaler skips for overflow, so fp16 training turns to NaN (seen with torch 2.11 on an H200
    and 2.14 on CPU; also reported in LibreYOLO/libreyolo pull request 771). Fused AdamW
    honours the skip. ``capturable`` (for CUDA graphs) keeps the learning rate in a device
    tensor, so the schedule changes it between graph replays without a host read.

    Under FSDP the parameters are DTensors and the kernels stay PyTorch's default (foreach);
    under ZeRO-1 the class runs inside ``ZeroRedundancyOptimizer`` on each rank's share.
    """
    make = hydra.utils.instantiate(
        {"_target_": optimizer._target_, "_partial_": True, **optimizer.kwargs}
    )
    cls = hydra.utils.get_class(optimizer._target_)
    accepts = inspect.signature(cls).parameters
    extra: dict[str, Any] = {}
    if "fused" in accepts and device.type == "cuda" and strategy != StrategyName.fsdp:
        safe = not (grad_scaler and issubclass(cls, torch.optim.SGD))
        extra["fused"] = True if safe else None
    if capturable and "capturable" in accepts:
        extra["capturable"] = True
    rate: float | torch.Tensor = torch.tensor(lr, device=device) if capturable else lr
    if strategy == StrategyName.zero1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(
            model.parameters(), optimizer_class=cls, lr=rate, weight_decay=weight_decay,
            **optimizer.kwargs, **extra,
        )  # fmt: skip
    return make(model.parameters(), lr=rate, weight_decay=weight_decay, **extra)


def build_schedule(
    optimizer: torch.optim.Optimizer, schedule: LrSchedule
) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule's multiplier on the optimizer's (scaled) learning rate, step by step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule.factor)
