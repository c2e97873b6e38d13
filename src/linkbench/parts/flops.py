"""Model FLOPs per training sample and the GPU's peak, for model FLOPs utilisation (MFU).

MFU = model FLOPs per second achieved / (one device's peak FLOPs per second x devices).
Model FLOPs count the forward and backward pass of the model as written, once: a model
that defines ``train_flops_per_sample()`` (linkbench's GPT: the PaLM formula) says it
itself; for any other, PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` counts one
forward and backward pass on the meta device (no memory, no compute). It counts two
samples and halves the total, so normalisation layers in training mode see more than one
value per channel even where the last feature map is 1x1 (a 32-pixel ResNet).

Peaks are dense tensor-core throughput from NVIDIA's datasheets (half of the "with
sparsity" figures) at the step's precision; fp32 is the non-tensor-core peak. A GPU not in
the table, or a CPU, gets no MFU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from linkbench.config.groups import ModelConfig
from linkbench.parts.models import COUNTED_SAMPLES, build_model, example_inputs

# TFLOP/s per device: NVIDIA H200, H100 (SXM5, PCIe) and A100 datasheets, and the L40S's.
PEAK_TFLOPS: dict[str, dict[str, float]] = {
    "H200": {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0},
    "H100 80GB HBM3": {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0},
    "H100 PCIe": {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.0},
    "A100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "L40S": {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6},
}


@dataclass(frozen=True)
class FlopRate:
    """A sample's training FLOPs and the device's peak (None where unknown)."""

    flops_per_sample: int
    peak_tflops: float | None

    def metrics(self, samples_per_sec_per_device: float) -> dict[str, float]:
        """Achieved model TFLOP/s per device, and MFU where the peak is known."""
        tflops = self.flops_per_sample * samples_per_sec_per_device / 1e12
        out = {"flops_per_sample": float(self.flops_per_sample), "model_tflops_per_device": tflops}
        if self.peak_tflops:
            out.update(peak_tflops=self.peak_tflops, mfu=tflops / self.peak_tflops)
        return out


def peak_tflops(device: torch.device | str, precision: str) -> float | None:
    """The datasheet peak of a CUDA device (or a device name) at ``precision``; None on CPU
    and for GPUs not in :data:`PEAK_TFLOPS`."""
    if isinstance(device, torch.device):
        if device.type != "cuda":
            return None
        device = torch.cuda.get_device_name(device)
    for key, peaks in PEAK_TFLOPS.items():
        if key in device:
            return peaks[str(precision)]
    return None


def train_flops_per_sample(model: ModelConfig, image_size: int, num_classes: int) -> int:
    """FLOPs of one training step's forward and backward pass for one sample, of the model
    the workers build (its head of the data's ``num_classes``).

    Builds the model on the meta device, so it also proves that the model's config builds
    (the launching process calls it once per job, before any worker starts)."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        net = build_model(model, num_classes)
        own = getattr(net, "train_flops_per_sample", None)
        if callable(own):
            return int(own())
        inputs = example_inputs(model, COUNTED_SAMPLES, image_size)
        counter = FlopCounterMode(display=False)
        with counter:
            net(inputs).float().sum().backward()
    return int(counter.get_total_flops()) // COUNTED_SAMPLES
