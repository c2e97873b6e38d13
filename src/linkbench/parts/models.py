"""The models a job can train, and how any model is built from its config.

Every model is named in YAML by Hydra's ``_target_`` and built by :func:`build_model`
(``hydra.utils.instantiate`` with ``model.kwargs``), so a torchvision classifier or a
user's own ``nn.Module`` needs no code here. Two live in linkbench itself: a tiny CNN that
trains on two CPU cores in seconds, and a small GPT. :func:`cross_entropy` is the default
loss for either kind of input (image classes or next tokens).
"""

from __future__ import annotations

from typing import Any

import hydra.utils
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parameter import is_lazy

from linkbench.config.groups import ModelConfig

# TinyCNN pools its last feature map to this side: a little of where features are survives.
POOLED = 4


class TinyCNN(nn.Module):
    """Two convolutions and a linear head: trains on two CPU cores in seconds."""

    def __init__(self, num_classes: int, in_channels: int = 3) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(POOLED),
        )
        self.head = nn.Linear(32 * POOLED * POOLED, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(images), 1))


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention."""

    def __init__(self, d_model: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, seq, self.n_head, -1).transpose(1, 2) for t in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(batch, seq, width))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """A small decoder-only transformer; the output head shares the token embedding."""

    def __init__(
        self, vocab_size: int, seq_len: int, n_layer: int, n_head: int, d_model: int
    ) -> None:
        super().__init__()
        for key, value in dict(n_layer=n_layer, n_head=n_head, d_model=d_model).items():
            if value <= 0:
                raise ValueError(f"{key}={value} must be positive")
        if d_model % n_head:
            raise ValueError(f"d_model={d_model} must be a multiple of n_head={n_head}")
        self.seq_len, self.n_layer, self.d_model = seq_len, n_layer, d_model
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(seq_len, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tokens.weight
        nn.init.normal_(self.tokens.weight, std=0.02)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tokens(tokens) + self.positions(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))

    def train_flops_per_sample(self) -> int:
        """6N + 12·L·d·T FLOPs per token (PaLM, Chowdhery et al. 2022, appendix B), N the
        parameters without the position embedding, times T tokens of a sequence."""
        params = sum(p.numel() for p in self.parameters()) - self.positions.weight.numel()
        per_token = 6 * params + 12 * self.n_layer * self.d_model * self.seq_len
        return per_token * self.seq_len


def build_model(model: ModelConfig, num_classes: int | None = None) -> nn.Module:
    """``model._target_(**model.kwargs)``, with random weights; ``num_classes`` (the data's
    count, ``data.num_classes`` as the plan resolved it) replaces the kwarg of that name
    where there is one."""
    kwargs = dict(model.kwargs)
    if num_classes is not None and "num_classes" in kwargs:
        kwargs["num_classes"] = num_classes
    built = hydra.utils.instantiate({"_target_": model._target_, **kwargs})
    if not isinstance(built, nn.Module):
        raise TypeError(f"model._target_={model._target_} made a {type(built).__name__}, "
                        "not a torch.nn.Module")  # fmt: skip
    return built


def materialize(net: nn.Module, model: ModelConfig, image_size: int) -> nn.Module:
    """Initialise a model's lazy parameters (``nn.LazyLinear`` ...) with one forward pass of
    example inputs on the model's device, as DDP needs every parameter's shape."""
    if any(is_lazy(p) for p in net.parameters()):
        device = next(net.parameters()).device
        with torch.no_grad(), torch.device(device):
            net(example_inputs(model, COUNTED_SAMPLES, image_size))
    return net


# Samples in an example batch (two, so BatchNorm in training mode sees more than one value
# per channel even where a feature map is 1x1).
COUNTED_SAMPLES = 2


def example_inputs(model: ModelConfig, batch: int, image_size: int) -> torch.Tensor:
    """A batch of the model's inputs on the current default device (values arbitrary)."""
    if model.input == "tokens":
        return torch.zeros(batch, model.seq_len, dtype=torch.long)
    return torch.zeros(batch, model.in_channels, image_size, image_size)


def cross_entropy(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over classes, or over the vocabulary at every token position."""
    return F.cross_entropy(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))


def loss_function(model: ModelConfig) -> Any:
    """The function ``model.loss`` names (a dotted path)."""
    return hydra.utils.get_method(model.loss)
