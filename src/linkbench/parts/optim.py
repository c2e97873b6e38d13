"""The optimizer named by ``optimizer._target_`` and its learning-rate schedule.

The optimizer is ``_target_(params, lr=..., weight_decay=..., **kwargs)``, with PyTorch's
fused kernels on GPU where the class has them and they are safe, and a capturable
learning-rate tensor for CUDA graphs. The strategy builds it over its parameters (ZeRO-1
inside ``ZeroRedundancyOptimizer``).
"""

from __future__ import annotations

import inspect
from typing import Any

import hydra.utils
import torch

from linkbench.config.groups import OptimizerConfig
from linkbench.config.scaling import LrSchedule


def optimizer_class(
    optimizer: OptimizerConfig,
    lr: float,
    weight_decay: float,
    device: torch.device,
    grad_scaler: bool,
    capturable: bool = False,
    fused: bool = True,
) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The configured optimizer's class and its keyword arguments at ``lr``: a strategy
    builds it over its parameters (:meth:`linkbench.parts.strategy.Parallel.build_optimizer`).

    ``fused`` asks for PyTorch's fused kernels on GPU where the class has them and they are
    safe. SGD is not fused under a GradScaler: fused SGD advances its momentum on the steps
    the scaler skips for overflow, so fp16 training turns to NaN (seen with torch 2.11 on an
    H200 and 2.14 on CPU; also reported in LibreYOLO/libreyolo pull request 771). Fused AdamW
    honours the skip. ``capturable`` (for CUDA graphs) keeps the learning rate in a device
    tensor, so the schedule changes it between graph replays without a host read.
    """
    cls = hydra.utils.get_class(optimizer._target_)
    accepts = inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {"weight_decay": weight_decay, **optimizer.kwargs}
    if fused and "fused" in accepts and device.type == "cuda":
        safe = not (grad_scaler and issubclass(cls, torch.optim.SGD))
        kwargs["fused"] = True if safe else None
    if capturable and "capturable" in accepts:
        kwargs["capturable"] = True
    kwargs["lr"] = torch.tensor(lr, device=device) if capturable else lr
    return cls, kwargs


def build_schedule(
    optimizer: torch.optim.Optimizer, schedule: LrSchedule
) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule's multiplier on the optimizer's (scaled) learning rate, step by step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule.factor)
