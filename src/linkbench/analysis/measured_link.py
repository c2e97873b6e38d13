"""A link as a ``task=allreduce`` job measured it: bus bandwidth against message size.

The projection (:mod:`linkbench.analysis.projection`) can use a measured curve instead of a
datasheet line rate: the bus bandwidth of each collective at the message size a training job
sends, interpolated between the measured sizes on log-log axes (clamped at the ends). Time
per message follows nccl-tests' definitions backwards: t = S x factor / busbw, with factor
2(n-1)/n for all_reduce and (n-1)/n for all_gather and reduce_scatter (S the whole tensor).
The curve's bus bandwidth is taken to hold at any GPU count: that is what bus bandwidth is
defined for, and what a larger ring on the same kind of link approaches.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from typing import Any

from linkbench.link.bandwidth import bus_factor
from linkbench.result import JobResult


@dataclass(frozen=True)
class Message:
    """``count`` messages of ``size`` bytes of one collective per training step."""

    op: str
    size: float
    count: float


@dataclass(frozen=True)
class MeasuredLink:
    """busbw (GB/s) against message bytes, per collective, from one allreduce job."""

    curves: dict[str, list[tuple[float, float]]]
    source: str
    world_size: int

    @classmethod
    def from_result(cls, result: JobResult, source: str) -> MeasuredLink:
        rows = [r for r in result.get("collectives", []) if r.get("busbw_gb_s", 0) > 0]
        if result.get("task") != "allreduce" or not rows:
            raise ValueError(
                f"{source} has no positive bus bandwidths: pass a task=allreduce job of two or "
                "more ranks"
            )
        curves: dict[str, list[tuple[float, float]]] = {}
        for row in rows:
            curves.setdefault(row["op"], []).append((float(row["bytes"]), row["busbw_gb_s"]))
        return cls({op: sorted(points) for op, points in curves.items()}, source,
                   int(result.get("world_size", 0)))  # fmt: skip

    def busbw_gb_s(self, op: str, size: float) -> float:
        """Bus bandwidth at ``size`` bytes: log-log interpolation, clamped at the ends."""
        points = self.curves.get(op) or self.curves["all_reduce"]
        sizes = [s for s, _ in points]
        at = bisect.bisect_left(sizes, size)
        if at == 0:
            return points[0][1]
        if at == len(points):
            return points[-1][1]
        (s0, b0), (s1, b1) = points[at - 1], points[at]
        share = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0))
        return math.exp(math.log(b0) + share * (math.log(b1) - math.log(b0)))

    def comm_ms(self, n: int, messages: list[Message]) -> float:
        """Milliseconds per step of the messages on a ring of ``n`` GPUs of this link."""
        if n < 2:
            return 0.0
        return sum(
            m.count * m.size * bus_factor(m.op, n) / (self.busbw_gb_s(m.op, m.size) * 1e9) * 1e3
            for m in messages
        )


def messages_of(metrics: dict[str, Any]) -> list[Message]:
    """The collectives a training job sent per step (``metrics.comm_messages``: DDP's buckets,
    FSDP's per-unit all-gathers and reduce-scatters), or its bytes as one message."""
    if found := metrics.get("comm_messages"):
        return [Message(m["op"], float(m["bytes"]), float(m["count"])) for m in found]
    total = float(metrics.get("comm_bytes_per_step", metrics["grad_bytes"]))
    return [Message("all_reduce", total, 1.0)]
