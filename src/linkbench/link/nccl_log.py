"""Reading NCCL's own INFO logs: which transport did NCCL really use?

NCCL prints one "via" line per channel connection it sets up, e.g.
``Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read``, ``... via SHM/direct/direct``,
``... [send] via NET/Socket/0``. This module counts them by transport family, and reads the
version, the NVLS channel count, the intra-node path type of the graph search
(``type NVL/PIX``: NVL means NVLink) and the variables NCCL reports as set by the
environment. Formats of NCCL 2.5 to 2.28 are understood (see tests/test_nccl_log.py).

As a command: ``python -m linkbench.nccl_log FILE...`` prints the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

FAMILIES = ("P2P", "SHM", "NET")
_VERSION = re.compile(r"NCCL version (\S+)")
_VIA = re.compile(r"\bvia (\S+(?: \S+)*)\s*$")
_NVLS = re.compile(r"(\d+) nvls channels")
_GRAPH_TYPE = re.compile(r"\btype ([A-Z0-9]+)/([A-Z0-9]+)")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*?)\.?\s*$")
_RANKS = re.compile(r"\bnRanks (\d+)|\bnranks (\d+)")


def transport_family(via: str) -> str | None:
    """P2P, SHM or NET for the text after "via", or None for anything else."""
    head = via.split("/", 1)[0].strip()
    if head == "P2P":
        return "P2P"
    if head == "SHM" or via.startswith("direct shared memory"):
        return "SHM"
    if head == "NET" or head.startswith("COLLNET"):
        return "NET"
    return None


def parse_lines(lines: Iterable[str]) -> dict[str, Any]:
    """Summarise NCCL INFO lines (any number of ranks and files mixed together)."""
    channels = dict.fromkeys(FAMILIES, 0)
    transports: dict[str, int] = {}
    versions: set[str] = set()
    graph_types: set[str] = set()
    env: dict[str, str] = {}
    nvls = 0
    nranks = 0
    nccl_lines = 0
    for line in lines:
        if "NCCL" not in line:
            continue
        nccl_lines += 1
        if m := _VERSION.search(line):
            versions.add(m.group(1))
        if " via " in line and ("Channel" in line or "Ring" in line) and (m := _VIA.search(line)):
            label = m.group(1)
            family = transport_family(label)
            if family:
                channels[family] += 1
                transports[label] = transports.get(label, 0) + 1
        if m := _NVLS.search(line):
            nvls = max(nvls, int(m.group(1)))
        if "Pattern" in line and (m := _GRAPH_TYPE.search(line)):
            graph_types.add(m.group(1))
        if m := _ENV.search(line):
            env[m.group(1)] = m.group(2).strip()
        if m := _RANKS.search(line):
            nranks = max(nranks, int(m.group(1) or m.group(2)))
    return {
        "version": sorted(versions)[-1] if versions else None,
        "channels": channels,
        "transports": dict(sorted(transports.items())),
        "nvls_channels": nvls,
        "graph_intra_types": sorted(graph_types),
        "env": dict(sorted(env.items())),
        "nranks": nranks or None,
        "nccl_lines": nccl_lines,
    }


def parse_files(paths: Iterable[str | Path]) -> dict[str, Any]:
    """Summarise the NCCL lines in these files (missing files are skipped)."""
    read = [Path(p) for p in paths if Path(p).is_file()]

    def lines() -> Iterable[str]:
        for path in read:
            with path.open(errors="replace") as handle:
                yield from handle

    summary = parse_lines(lines())
    summary["files"] = [str(p) for p in read]
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m linkbench.nccl_log",
        description="Summarise NCCL INFO logs: version, channels per transport, NVLS channels.",
    )
    parser.add_argument("files", nargs="+", help="NCCL debug logs (NCCL_DEBUG=INFO output)")
    args = parser.parse_args(argv)
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        print(f"no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    json.dump(parse_files(args.files), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
