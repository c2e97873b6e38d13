"""Numerical precision of a training step: TF32 switches, autocast and loss scaling."""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def configure_tf32(allow: bool) -> None:
    """TF32 tensor-core matmuls and convolutions on or off (they have no effect on CPU)."""
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def autocast(
    precision_cfg: dict[str, Any], device: torch.device, cache: bool = True
) -> contextlib.AbstractContextManager:
    """The autocast context of a forward pass, or a no-op for fp32 and tf32.

    ``cache=False`` turns off autocast's cache of cast weights, which CUDA-graph capture
    needs (PyTorch's CUDA semantics notes, "Partial-network capture")."""
    dtype = precision_cfg["autocast_dtype"]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=getattr(torch, dtype), cache_enabled=cache)


def grad_scaler(precision_cfg: dict[str, Any], device: torch.device) -> torch.amp.GradScaler:
    """A GradScaler for fp16, disabled (a pass-through) otherwise."""
    return torch.amp.GradScaler(device.type, enabled=bool(precision_cfg["grad_scaler"]))
