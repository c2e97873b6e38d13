"""Axes a sweep varies that cannot act on its jobs: the arms then differ only in settings the
job never uses, so each comparison along the axis is an A/A check of the harness, and a
"slower" there says so rather than anything of a link.

- The interconnect arms and NCCL's variables (``interconnect``, ``nccl``, their keys) on
  **one rank**: there is no link between GPUs, only NCCL settings that nothing reads.
- The same on **gloo**, which reads no NCCL variable, unless an arm makes an emulated link
  (whose shaping carries any backend's traffic).
- An emulated link's settings with **one node**: every rank shares the node's namespace, so
  no traffic crosses the shaped uplink.

Said before the sweep starts (from the plans: :mod:`linkbench.launcher.sweeper`) and in the
summary's verdict lines (from the results).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NCCL_AXES = ("interconnect", "nccl")


@dataclass(frozen=True)
class JobShape:
    """What decides whether an axis can act on a job: its ranks, backend and emulated link."""

    world_size: int | None
    """None: not recorded (a result of an older linkbench)."""
    backend: str
    link_nodes: int | None
    """The emulated link's nodes; None: the job makes no emulated link."""


def shape_of(job: Mapping[str, Any]) -> JobShape:
    """A job's shape from its result.json."""
    link = job.get("link")
    nodes = link.get("nodes") if isinstance(link, dict) and "rate_gbit_s" in link else None
    size = job.get("world_size")
    return JobShape(int(size) if size is not None else None, str(job.get("backend")), nodes)


def _nccl_axis(axis: str) -> bool:
    return axis.split("/")[0].split(".")[0] in NCCL_AXES


def inert_reason(axis: str, jobs: Iterable[JobShape]) -> str | None:
    """Why ``axis`` cannot act on any of ``jobs`` (one clause), or None where it can."""
    shapes = list(jobs)
    if not shapes or not _nccl_axis(axis):
        return None
    links = [s.link_nodes for s in shapes if s.link_nodes is not None]
    if links:
        if len(links) == len(shapes) and all(n == 1 for n in links):
            return (
                "one node: every rank shares its namespace, so no traffic crosses the shaped "
                "link and its settings cannot act"
            )
        return None  # an emulated link acts on any backend
    if all(s.world_size == 1 for s in shapes):
        return "one rank: no link between GPUs; this compares NCCL settings, not links"
    if all(s.backend == "gloo" for s in shapes):
        return "every job runs on gloo, which reads no NCCL setting"
    return None


def a_a_note(axis: str, reason: str) -> str:
    """The sentence a sweep along an axis that cannot act gets, before it starts and in its
    summary."""
    return (
        f"{axis} cannot act on these jobs ({reason}): each comparison along it is an A/A "
        "check of the harness and should read equal or inconclusive; a faster or slower "
        "there is the harness's difference (or chance), not the setting's."
    )
