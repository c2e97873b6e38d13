"""Learning-rate scaling with the global batch, and the schedule over the run.

``linear``: lr = base_lr x global_batch / reference_batch (Goyal et al. 2017,
"Accurate, Large Minibatch SGD", arXiv:1706.02677); ``sqrt``: lr = base_lr x
sqrt(global_batch / reference_batch); ``none``: lr = base_lr.

The schedule multiplies the scaled rate: a linear warmup over the first steps, from zero or,
as Goyal et al.'s gradual warmup, from the unscaled base rate; then constant, or step decay
(x ``decay_factor`` at fractions ``decay_at`` of the run, Goyal et al.'s / 10 at epochs 30,
60 and 80 of 90), or cosine decay to zero (Loshchilov and Hutter, "SGDR", arXiv:1608.03983).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from linkbench.config.choices import Decay, ScalingRule

# Multiplier on base_lr for a global batch this many times scaling.reference_batch.
RULES = {
    ScalingRule.linear: lambda ratio: ratio,
    ScalingRule.sqrt: math.sqrt,
    ScalingRule.none: lambda ratio: 1.0,
}


def scaled_lr(base_lr: float, rule: ScalingRule, global_batch: int, reference_batch: int) -> float:
    """The peak learning rate for this global batch."""
    return base_lr * RULES[rule](global_batch / reference_batch)


@dataclass(frozen=True)
class LrSchedule:
    """The multiplier on the scaled learning rate at each optimizer step."""

    warmup_steps: int = 0
    start: float = 0.0
    """The warmup's first multiplier: 0, or base_lr / scaled lr (gradual warmup)."""
    total_steps: int = 1
    decay: Decay = Decay.none
    decay_at: tuple[float, ...] = ()
    decay_factor: float = 0.1

    def factor(self, step: int) -> float:
        """The multiplier at optimizer step ``step`` (0-based)."""
        if step < self.warmup_steps:
            if self.start == 0.0:  # from zero: the first step already takes a share
                return (step + 1) / self.warmup_steps
            return self.start + (1.0 - self.start) * step / self.warmup_steps
        if self.decay == Decay.cosine:
            progress = (step - self.warmup_steps) / max(1, self.total_steps - self.warmup_steps)
            return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))
        if self.decay == Decay.step:
            passed = sum(step >= at * self.total_steps for at in self.decay_at)
            return self.decay_factor**passed
        return 1.0
