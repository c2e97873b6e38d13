"""Where a worker process sits in its job's world, and the reduction across ranks."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Rank:
    rank: int
    local_rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def max_over_ranks(value: float, device: torch.device) -> float:
    """The largest ``value`` of any rank (a collective: every rank must call it)."""
    buf = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(buf, op=dist.ReduceOp.MAX)
    return buf.item()
