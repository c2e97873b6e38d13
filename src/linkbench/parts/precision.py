"""Numerical precision of a training step: TF32 switches, autocast and loss scaling."""

from __future__ import annotations

import contextlib

import torch

from linkbench.config.groups import PrecisionConfig


def configure_tf32(allow: bool) -> None:
    """TF32 tensor-core matmuls and convolutions on or off (they have no effect on CPU)."""
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


def autocast(
    precision: PrecisionConfig, device: torch.device, cache: bool = True
) -> contextlib.AbstractContextManager:
    """The autocast context of a forward pass, or a no-op for fp32 and tf32.

    ``cache=False`` turns off autocast's cache of cast weights, which CUDA-graph capture
    needs (PyTorch's CUDA semantics notes, "Partial-network capture")."""
    if precision.autocast_dtype is None:
        return contextlib.nullcontext()
    dtype = getattr(torch, str(precision.autocast_dtype))
    return torch.autocast(device_type=device.type, dtype=dtype, cache_enabled=cache)


def grad_scaler(precision: PrecisionConfig, device: torch.device) -> torch.amp.GradScaler:
    """A GradScaler for fp16, disabled (a pass-through) otherwise."""
    return torch.amp.GradScaler(device.type, enabled=precision.grad_scaler)
