"""Learning-rate scaling with the global batch, and the warmup schedule.

``linear``: lr = base_lr x global_batch / reference_batch (Goyal et al. 2017,
"Accurate, Large Minibatch SGD", arXiv:1706.02677); ``sqrt``: lr = base_lr x
sqrt(global_batch / reference_batch); ``none``: lr = base_lr.
"""

from __future__ import annotations

import math


def scaled_lr(base_lr: float, rule: str, global_batch: int, reference_batch: int) -> float:
    """The peak learning rate for this global batch."""
    ratio = global_batch / reference_batch
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    if rule == "none":
        return base_lr
    raise ValueError(f"unknown scaling rule {rule!r}")


def warmup_factor(step: int, lr_warmup_steps: int) -> float:
    """Multiplier on the peak lr at optimizer step ``step`` (0-based): a linear ramp to 1."""
    if lr_warmup_steps <= 0:
        return 1.0
    return min(1.0, (step + 1) / lr_warmup_steps)
