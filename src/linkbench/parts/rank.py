"""Where a worker process sits in its job's world, and the reduction across ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from linkbench.config.layout import Layout


@dataclass(frozen=True)
class Rank:
    """This process's global and local rank, the world's size, the device it trains on, and
    where it sits in the plan's layout (data-parallel only unless given)."""

    rank: int
    local_rank: int
    world_size: int
    device: torch.device
    layout: Layout | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def _layout(self) -> Layout:
        return self.layout or Layout(self.world_size)

    @property
    def dp_size(self) -> int:
        """Data-parallel replicas of the model."""
        return self._layout.data

    @property
    def dp_rank(self) -> int:
        """Which replica this rank belongs to: what its data and its seed follow."""
        return self._layout.data_rank(self.rank)

    @property
    def holds_loss(self) -> bool:
        """Whether this rank counts its replica's loss and held-out figures."""
        return self._layout.holds_loss(self.rank)


def _reduce(value: float | torch.Tensor, device: torch.device, op: Any) -> float:
    buf = torch.as_tensor(value, dtype=torch.float64, device=device).detach().reshape(1).clone()
    dist.all_reduce(buf, op=op)
    return buf.item()


def sum_over_ranks(value: float | torch.Tensor, device: torch.device) -> float:
    """The sum of every rank's ``value`` (a collective: every rank must call it; gloo has
    no AVG, so means are sums divided by the world size)."""
    return _reduce(value, device, dist.ReduceOp.SUM)


def max_over_ranks(value: float | torch.Tensor, device: torch.device) -> float:
    """The largest ``value`` of any rank (a collective: every rank must call it)."""
    return _reduce(value, device, dist.ReduceOp.MAX)
