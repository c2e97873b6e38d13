"""The optimizer and its learning-rate schedule (warmup to the scaled lr, then constant)."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from linkbench.scaling import warmup_factor


def build_optimizer(
    model: nn.Module, model_cfg: dict[str, Any], lr: float, device: torch.device
) -> torch.optim.Optimizer:
    """SGD with momentum, or AdamW with fused kernels on GPU, at ``lr``.

    SGD is never fused: fused SGD advances its momentum on the steps a GradScaler skips for
    overflow, so fp16 training turns to NaN (seen with torch 2.11 on an H200 and 2.14 on CPU;
    also reported in LibreYOLO/libreyolo pull request 771). Fused AdamW honours the skip.
    """
    decay = model_cfg["weight_decay"]
    if model_cfg["optimizer"] == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=decay)
    fused = device.type == "cuda"
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=decay, fused=fused)


def build_schedule(
    optimizer: torch.optim.Optimizer, lr_warmup_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup over ``lr_warmup_steps`` optimizer steps, then the peak lr."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_factor(step, lr_warmup_steps)
    )
