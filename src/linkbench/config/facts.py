"""What the launcher finds before a job is planned, read without changing anything: the
machine, the data the data option reads, the checkpoint a resumed job continues from, and
whether this host can make the link the config asks for. :func:`linkbench.config.plan.make_plan`
decides from these facts and the config; it reads, moves and writes no file itself
(:mod:`linkbench.launcher.planning` gathers them and does what the plan says to the disk)."""

from __future__ import annotations

from dataclasses import dataclass, field

from linkbench.config.data import DataFound
from linkbench.config.machine import Machine
from linkbench.files import CheckpointFound


@dataclass(frozen=True)
class Facts:
    """The facts one job is planned from (the defaults: nothing found, nothing to find)."""

    machine: Machine
    data: DataFound = field(default_factory=DataFound)
    """What the data holds (:meth:`linkbench.config.data.DataConfig.survey`)."""
    checkpoint: CheckpointFound = field(default_factory=CheckpointFound)
    """The job directory's checkpoint, where ``resume=true``."""
    link_problem: str | None = None
    """Why this host cannot make the link the config asks for (None: it can, or there is
    none to make): :meth:`linkbench.config.links.LinkConfig.survey`."""
