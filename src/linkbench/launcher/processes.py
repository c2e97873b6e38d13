"""This host's processes as the launching process sees them in /proc: the children of one."""

from __future__ import annotations

from pathlib import Path


def children(parent: int) -> list[int]:
    """The pids of ``parent``'s live children: from each of its threads' ``children`` list
    (Linux 3.5 and newer), else a scan of every process's parent (a kernel without those
    lists), which costs far more on a busy host."""
    lists = list(Path(f"/proc/{parent}/task").glob("*/children"))
    if lists:
        found: set[int] = set()
        for path in lists:
            try:
                found.update(int(pid) for pid in path.read_text().split())
            except (OSError, ValueError):
                continue
        return sorted(found)
    found_by_scan = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                found_by_scan.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return found_by_scan
