"""Learning-rate scaling with the global batch, and the warmup schedule.

``linear``: lr = base_lr x global_batch / reference_batch (Goyal et al. 2017,
"Accurate, Large Minibatch SGD", arXiv:1706.02677); ``sqrt``: lr = base_lr x
sqrt(global_batch / reference_batch); ``none``: lr = base_lr.
"""

from __future__ import annotations

import math

from linkbench.config.schema import ScalingRule

# Multiplier on base_lr for a global batch this many times scaling.reference_batch.
RULES = {
    ScalingRule.linear: lambda ratio: ratio,
    ScalingRule.sqrt: math.sqrt,
    ScalingRule.none: lambda ratio: 1.0,
}


def scaled_lr(base_lr: float, rule: ScalingRule, global_batch: int, reference_batch: int) -> float:
    """The peak learning rate for this global batch."""
    return base_lr * RULES[rule](global_batch / reference_batch)


def warmup_factor(step: int, lr_warmup_steps: int) -> float:
    """Multiplier on the peak lr at optimizer step ``step`` (0-based): a linear ramp to 1."""
    if lr_warmup_steps <= 0:
        return 1.0
    return min(1.0, (step + 1) / lr_warmup_steps)
