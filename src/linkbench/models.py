"""The models a job can train: a tiny CNN, torchvision classifiers and a small GPT.

Each model maps a batch of inputs to logits; :func:`loss_fn` turns logits and targets into
the scalar loss for either kind of input (image classes or next tokens).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class TinyCNN(nn.Module):
    """Two convolutions and a linear head: trains on two CPU cores in seconds."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, num_classes)

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

    def __init__(self, vocab_size: int, seq_len: int, n_layer: int, n_head: int, d_model: int):
        super().__init__()
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


def build_model(model_cfg: dict[str, Any], image_size: int, num_classes: int) -> nn.Module:
    """Construct the model named by ``model_cfg['name']`` with random weights."""
    name = model_cfg["name"]
    if name == "tiny":
        return TinyCNN(num_classes)
    if name == "gpt":
        keys = ("vocab_size", "seq_len", "n_layer", "n_head", "d_model")
        return GPT(**{k: model_cfg[k] for k in keys})
    import torchvision.models as tvm

    if name in ("resnet18", "resnet50"):
        return getattr(tvm, name)(weights=None, num_classes=num_classes)
    if name == "vit_b_16":
        return tvm.vit_b_16(weights=None, image_size=image_size, num_classes=num_classes)
    raise ValueError(f"unknown model {name!r}")


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over classes, or over the vocabulary at every token position."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
