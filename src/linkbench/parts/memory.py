"""A rough estimate of what one rank of a training job holds in memory, from the model built
on the meta device (no memory, no compute): its weights, gradients and optimizer state, and
the activations one sample keeps for the backward pass, which grow with the batch.

Rough on purpose: it counts every module's output once at four bytes an element (the
autograd graph keeps most of them; precision and fused kernels change the rest), adds the
batch's own inputs, and counts no allocator overhead or framework workspace. The plan uses it
only to warn, before any worker starts, that a job would not fit (``batch=300000``), not to
refuse one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from linkbench.config.groups import ModelConfig
from linkbench.parts.models import COUNTED_SAMPLES, build_model, example_inputs

# Copies of the weights a rank holds besides the weights themselves: the gradients and DDP's
# gradient buckets; the optimizer adds its own (momentum: one, Adam: two).
WEIGHT_COPIES = 3
BYTES = 4  # an fp32 element


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes one rank holds: fixed (weights, gradients, optimizer state) and per sample."""

    fixed_bytes: int
    per_sample_bytes: int

    def at(self, batch: int) -> int:
        return self.fixed_bytes + batch * self.per_sample_bytes


def estimate_memory(
    model: ModelConfig, image_size: int, num_classes: int, optimizer_states: int
) -> MemoryEstimate:
    """What one rank of a training job with this model holds (:class:`MemoryEstimate`)."""
    outputs = 0

    def count(module: nn.Module, args: object, output: object) -> None:
        nonlocal outputs
        if isinstance(output, torch.Tensor):
            outputs += output.numel()

    with torch.device("meta"):
        net = build_model(model, num_classes)
        hooks = [m.register_forward_hook(count) for m in net.modules() if not list(m.children())]
        inputs = example_inputs(model, COUNTED_SAMPLES, image_size)
        try:
            net(inputs)
        finally:
            for hook in hooks:
                hook.remove()
    weights = sum(p.numel() for p in net.parameters())
    per_sample = (outputs + inputs.numel()) // COUNTED_SAMPLES
    return MemoryEstimate(
        fixed_bytes=weights * BYTES * (WEIGHT_COPIES + optimizer_states),
        per_sample_bytes=per_sample * BYTES,
    )
