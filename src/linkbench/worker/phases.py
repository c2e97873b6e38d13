"""This worker's marks of where its time goes: the end of each phase on the wall clock, in
order (the phases' names and how they are summed: :mod:`linkbench.analysis.phases`). Rank 0
returns them with its results."""

from __future__ import annotations

import time

_marks: list[tuple[str, float]] = []


def reset() -> None:
    """Start this process's marks afresh (a worker forked from a server that ran before)."""
    _marks.clear()


def mark(phase: str) -> None:
    """``phase`` ends now."""
    _marks.append((phase, time.time()))


def marks() -> list[tuple[str, float]]:
    return list(_marks)
