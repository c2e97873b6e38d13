"""The optimizer and its learning-rate schedule (warmup to the scaled lr, then constant)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from linkbench.scaling import warmup_factor


def build_optimizer(
    model: nn.Module,
    model_cfg: dict[str, Any],
    lr: float,
    device: torch.device,
    grad_scaler: bool,
    capturable: bool = False,
) -> torch.optim.Optimizer:
    """SGD with momentum or AdamW at ``lr``, with fused kernels on GPU where that is safe.

    SGD is not fused under a GradScaler: fused SGD advances its momentum on the steps the
    scaler skips for overflow, so fp16 training turns to NaN (seen with torch 2.11 on an H200
    and 2.14 on CPU; also reported in LibreYOLO/libreyolo pull request 771). Fused AdamW
    honours the skip. ``capturable`` (for CUDA graphs) keeps the learning rate in a device
    tensor, so the schedule changes it between graph replays without a host read.
    """
    decay = model_cfg["weight_decay"]
    cuda = device.type == "cuda"
    rate: float | torch.Tensor = torch.tensor(lr, device=device) if capturable else lr
    if model_cfg["optimizer"] == "sgd":
        return torch.optim.SGD(
            model.parameters(),
            lr=rate,
            momentum=0.9,
            weight_decay=decay,
            fused=(cuda and not grad_scaler) or None,
        )
    return torch.optim.AdamW(
        model.parameters(),
        lr=rate,
        weight_decay=decay,
        fused=cuda or None,
        capturable=capturable,
    )


def build_schedule(
    optimizer: torch.optim.Optimizer, lr_warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``lr_warmup_steps`` optimizer steps, then the peak lr."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_factor(step, lr_warmup_steps)
    )
