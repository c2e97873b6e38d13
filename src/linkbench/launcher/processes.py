"""This host's processes as the launching process sees them in /proc: the children of one."""

from __future__ import annotations

from pathlib import Path


def children(parent: int) -> list[int]:
    """The pids of ``parent``'s live children."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found
