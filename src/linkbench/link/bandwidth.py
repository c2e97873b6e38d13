"""Bus bandwidth as nccl-tests defines it (nccl-tests, doc/PERFORMANCE.md): algbw = S / t with
S the message bytes and GB = 1e9 bytes; busbw = algbw x 2(n-1)/n for all_reduce and x (n-1)/n
for all_gather and reduce_scatter, where S is the whole gathered or scattered array.
Plain arithmetic, so the analysis reads it without torch."""

from __future__ import annotations


def bus_factor(op: str, world_size: int) -> float:
    """nccl-tests' busbw / algbw ratio."""
    n = world_size
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def bandwidths_gb_s(
    op: str, size_bytes: int, seconds: float, world_size: int
) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9 bytes) for one call of ``op`` on ``size_bytes``."""
    algbw = size_bytes / seconds / 1e9
    return algbw, algbw * bus_factor(op, world_size)
