"""Reading NCCL's own INFO logs: which transport, algorithm and protocol did NCCL really use?

NCCL prints one "via" line per connection it sets up: ``Channel 00/0 : 0[0] -> 1[1] via
P2P/CUMEM/read``, ``... via SHM/direct/direct``, ``... [send] via NET/Socket/0``, the
``Ring 00 : 4[4] -> 5[5] via P2P/IPC`` and ``... via direct shared memory`` of NCCL 2.3-2.5,
and ``CollNet 05/0 : 5 [receive] via COLLNET/SHARP/5/GDRDMA`` (counted as NET). This module
counts them by transport family, and reads the version, the NVLS channel count, the intra-node
path type of the graph search (``type NVL/PIX``: NVL means NVLink), the number of ranks and the
variables NCCL reports as set by the environment (``NCCL_BUFFSIZE set by environment to
4194304.``: the period NCCL prints after integers is dropped).

With ``NCCL_DEBUG_SUBSYS`` including TUNING, rank 0 of each communicator prints one line per
collective call naming the algorithm and protocol it chose; ``tuning`` counts them. The line
changed over the versions (src/enqueue.cc):

* 2.20-2.22: ``805306368 Bytes -> Algo 1 proto 2 time 3970.683594``
* 2.23: ``AllReduce: 1048576 Bytes -> Algo 1 proto 2 time 37.600000``
* 2.24-2.30: ``AllReduce: 4 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}``

Numbers and names both map to NCCL's own spellings (ALGORITHMS, PROTOCOLS). NCCL 2.19 and
older print that line only at TRACE level (a TRACE build); TRACE lines are counted only when
a log has no INFO ones, so a TRACE build's second copy of each call is not counted twice. The
symmetric-kernel and copy-engine lines of 2.27+ (``AllReduce [Symmetric]: ... -> Kernel ...``)
name no algorithm and are not counted. ``requested_vs_used`` compares those counts with the
NCCL_ALGO / NCCL_PROTO a job asked for.

Logs are read as users paste them: launcher decorations around each record are dropped
(Open MPI's ``[1,3]<stdout>:``, Ray's ``(RayWorkerWrapper pid=539)`` and ``(RayTrainWorker
pid=615, ip=10.72.7.6)`` prefixes and ``[repeated 15x across cluster]`` suffixes, ANSI colour
codes, whether as escape bytes or pasted as ``ESC[36m``), two records glued onto one physical
line are split at the second record's header, and the body of a record that lost its header
to another rank's interleaved output (``Ring 04 : 6[6] -> 5[5] via P2P/IPC`` alone on a line)
still counts. Formats of NCCL 2.3 to 2.30 are understood (see tests/link/test_nccl_log.py and
the sources in tests/link/data/nccl/README.md).

A record whose header was stripped (a log shown as messages only) is still read where its
body is one of those above. What a log lacks (a version line, a rank count, connection or
TUNING lines) is listed in ``lacks``, with what makes NCCL print it.

As a command: ``python -m linkbench.nccl_log FILE...`` prints the summary as JSON, and what
the logs lack in one sentence on stderr.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

FAMILIES = ("P2P", "SHM", "NET")
# NCCL's display names (ncclAlgoStr / ncclProtoStr in src/init.cc), in the order of its
# numbering (NCCL_ALGO_TREE 0 ... NCCL_ALGO_PAT 6; NCCL_PROTO_LL 0, LL128 1, SIMPLE 2).
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
PROTOCOLS = ("LL", "LL128", "Simple")

# ANSI colour codes: escape sequences, the "ESC[36m" / "^[[36m" a terminal paste leaves in
# their place, and a bare "[36m" whose escape byte was lost on the way.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|(?:ESC|\^\[)\[[0-9;]*m|\[\d{1,3}(?:;\d{1,3})*m")
# What launchers put before a record: Open MPI's "[1,3]<stdout>:", Horovod's "[0]<stdout>:",
# bare "[155]" rank tags, "[2025-10-23 10:26:31]" timestamps (NCCL 2.26+ among them), and
# Ray's "(pid=1)", "(RayWorkerWrapper pid=539)", "(RayTrainWorker pid=615, ip=10.72.7.6)".
_LAUNCHER = (
    r"(?:\[[\d\-:T. ,]+\](?:<std(?:out|err)>:)?|\((?:[\w.\-]+ )?pid=\d+(?:, ip=[\w.:\-]+)?\))"
)
# The level word that ends the header of every NCCL record.
_LEVEL = re.compile(r"NCCL (INFO|WARN|TRACE|CALL|ABORT)\b ?")
# What comes before it in that header, up to the end of the text searched: launcher
# decorations, "host:pid:tid ", "[cudaDev] ", and the "file.cc:123 (func) " of WARN or
# "12.3 func:45 " of TRACE records.
_HEADER_START = re.compile(
    rf"(?:{_LAUNCHER}\s*)*"
    r"(?:[^\s/]{0,255}:\d+:\d+ )?"
    r"(?:\[\d+\] (?:\S+ ){0,2}?)?\Z"
)
_LEADING_LAUNCHER = re.compile(rf"^\s*(?:{_LAUNCHER}\s*)*")
# Ray's deduplication note, and everything after it on the line.
_RAY_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
# One connection: Channel/Ring/CollNet NN[/M] : ... via LABEL.
_CONNECTION = re.compile(r"^(?:Channel|Ring|CollNet) +\d+(?:/\d+)? : .*?\bvia (\S.*?)\s*$")
# ROCm's RCCL (seen through Ray in ray-project/ray#59778) appends this to the label.
_RCCL_SUFFIX = re.compile(r"\s+comm 0x[0-9a-fA-F]+\b.*$")
_VERSION = re.compile(r"NCCL version (\S+)")
_NVLS = re.compile(r"(\d+) nvls channels")
_GRAPH_TYPE = re.compile(r"\btype ([A-Z0-9]+)/([A-Z0-9]+)")
_ENV = re.compile(r"\b(NCCL_[A-Z0-9_]+) set by environment to (.*)$")
_INT_WITH_PERIOD = re.compile(r"-?\d+\.")
_RANKS = re.compile(r"\bn[Rr]anks[ =](\d+)")
_TUNING = re.compile(r"^(?:([A-Za-z]+): )?\d+ Bytes -> Algo (\S+) proto (\S+)")


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]", "", name).lower()


_ALGORITHM_KEYS = {_key(name): name for name in ALGORITHMS}
_PROTOCOL_KEYS = {_key(name): name for name in PROTOCOLS}


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


def _canonical(value: str, names: tuple[str, ...], keys: dict[str, str]) -> str:
    """NCCL's display name for a number ("1") or a spelling ("RING", "NVLS_TREE")."""
    if re.fullmatch(r"-?\d+", value):
        index = int(value)
        return names[index] if 0 <= index < len(names) else "Unknown"
    return keys.get(_key(value), value)


def choice_names(algo: str, proto: str) -> tuple[str, str]:
    """NCCL's display names (``Ring``, ``Simple``) of a TUNING line's algorithm and protocol,
    numbers (2.20-2.23) or spellings (2.24+: ``RING``, ``SIMPLE``)."""
    return (
        _canonical(algo, ALGORITHMS, _ALGORITHM_KEYS),
        _canonical(proto, PROTOCOLS, _PROTOCOL_KEYS),
    )


def records(line: str) -> Iterator[tuple[str | None, str]]:
    """(level, body) of each NCCL record on one physical line, decorations removed.

    level is INFO, WARN, TRACE... or None for a record without a header: a bare
    ``NCCL version ...`` line, or a connection line that lost its header to another rank."""
    if "NCCL" not in line and not any(word in line for word in _BARE_WORDS):
        return
    line = _ANSI.sub("", line)
    if "NCCL" not in line:
        body = _clean(_LEADING_LAUNCHER.sub("", line))
        if _CONNECTION.match(body) or _bare_record(body):
            yield None, body
        return
    levels = list(_LEVEL.finditer(line))
    if not levels:
        yield None, _clean(_LEADING_LAUNCHER.sub("", line))
        return
    before = line[: levels[0].start()]
    if "NCCL" in before:  # e.g. a bare "NCCL version" line glued in front of a record
        before = _LEADING_LAUNCHER.sub("", before[: _header_start(before)])
        if "NCCL" in before:
            yield None, _clean(before)
    for level, after in zip(levels, [*levels[1:], None], strict=True):
        end = len(line)
        if after:  # a second record glued on: this one ends where its header starts
            end = level.end() + _header_start(line[level.end() : after.start()])
        yield level.group(1), _clean(line[level.end() : end])


# Words one of which every record :func:`_bare_record` reads holds (a cheap first look).
_BARE_WORDS = (" via ", "anks", "nvls channels", " Bytes -> Algo ", "Pattern ")


def _bare_record(body: str) -> bool:
    """Whether a line without "NCCL" in it is the body of a record this module reads, its
    header stripped (logs shown as messages only, as in NVIDIA/nccl#1584 with NCCL 2.24.3):
    a communicator's rank count, the channel counts, a graph search result, a TUNING line."""
    return bool(
        _RANKS.search(body)
        or _NVLS.search(body)
        or _TUNING.match(body)
        or ("Pattern" in body and _GRAPH_TYPE.search(body))
    )


def _header_start(text: str) -> int:
    """Where the header of the record whose level word follows ``text`` starts in it."""
    match = _HEADER_START.search(text)
    return match.start() if match else len(text)


def _clean(body: str) -> str:
    return _RAY_REPEATED.sub("", body).strip()


def _env_value(value: str) -> str:
    value = value.strip()
    # Integer parameters are echoed as "%lld." (src/misc/param.cc).
    return value[:-1] if _INT_WITH_PERIOD.fullmatch(value) else value


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+", 1)[0]))


def _ordered(counts: Counter[str], names: tuple[str, ...]) -> dict[str, int]:
    known = [name for name in names if counts[name]]
    return {name: counts[name] for name in known + sorted(set(counts) - set(names))}


def _tuning_summary(calls: Counter[tuple[str | None, str, str]]) -> dict[str, Any]:
    """The ``tuning`` block from counts of (collective or None, algorithm, protocol)."""

    def counts(collective: str | None = None) -> dict[str, dict[str, int]]:
        algorithms: Counter[str] = Counter()
        protocols: Counter[str] = Counter()
        for (coll, algo, proto), n in calls.items():
            if collective is None or coll == collective:
                algorithms[algo] += n
                protocols[proto] += n
        return {
            "algorithms": _ordered(algorithms, ALGORITHMS),
            "protocols": _ordered(protocols, PROTOCOLS),
        }

    collectives = sorted({coll for coll, _, _ in calls if coll})
    return {
        "calls": sum(calls.values()),
        **counts(),
        "by_collective": {name: counts(name) for name in collectives},
    }


def parse_lines(lines: Iterable[str]) -> dict[str, Any]:
    """Summarise NCCL INFO lines (any number of ranks and files mixed together).

    ``tuning`` holds ``calls`` (per-call TUNING lines read), ``algorithms`` and ``protocols``
    (counts by NCCL's display names) and ``by_collective`` (the same counts for each
    collective the line names; the 2.20-2.22 lines name none, so they count only in the
    totals). ``nccl_lines`` counts NCCL records: a physical line holding two glued records
    counts twice."""
    channels = dict.fromkeys(FAMILIES, 0)
    transports: dict[str, int] = {}
    versions: set[str] = set()
    graph_types: set[str] = set()
    env: dict[str, str] = {}
    nvls = 0
    nranks = 0
    nccl_lines = 0
    # per-call TUNING lines: INFO ones, and TRACE ones for logs that have no INFO ones
    tuning: dict[bool, Counter[tuple[str | None, str, str]]] = {False: Counter(), True: Counter()}
    for line in lines:
        for level, body in records(line):
            nccl_lines += 1
            if level in (None, "INFO") and (m := _CONNECTION.match(body)):
                label = _RCCL_SUFFIX.sub("", m.group(1))
                family = transport_family(label)
                if family:
                    channels[family] += 1
                    transports[label] = transports.get(label, 0) + 1
            if level in (None, "INFO", "TRACE") and (m := _TUNING.match(body)):
                algo = _canonical(m.group(2), ALGORITHMS, _ALGORITHM_KEYS)
                proto = _canonical(m.group(3), PROTOCOLS, _PROTOCOL_KEYS)
                tuning[level == "TRACE"][m.group(1), algo, proto] += 1
            if m := _VERSION.search(body):
                versions.add(m.group(1))
            if m := _NVLS.search(body):
                nvls = max(nvls, int(m.group(1)))
            if "Pattern" in body and (m := _GRAPH_TYPE.search(body)):
                graph_types.add(m.group(1))
            if m := _ENV.search(body):
                env[m.group(1)] = _env_value(m.group(2))
            if m := _RANKS.search(body):
                nranks = max(nranks, int(m.group(1)))
    summary = {
        "version": max(versions, key=_version_key) if versions else None,
        "channels": channels,
        "transports": dict(sorted(transports.items())),
        "nvls_channels": nvls,
        "graph_intra_types": sorted(graph_types),
        "env": dict(sorted(env.items())),
        "nranks": nranks or None,
        "nccl_lines": nccl_lines,
        "tuning": _tuning_summary(tuning[False] or tuning[True]),
    }
    summary["lacks"] = lacks(summary)
    return summary


def lacks(summary: dict[str, Any]) -> list[str]:
    """What a log's summary could not find, each with what makes NCCL print it, so a log
    that lacks something says so instead of the summary guessing it."""
    if not summary["nccl_lines"]:
        return ["no NCCL record (was it written with NCCL_DEBUG=INFO?)"]
    missing = []
    if summary["version"] is None:
        missing.append("no NCCL version line (rank 0 prints it at its first communicator)")
    if summary["nranks"] is None:
        missing.append(
            "no rank count (a communicator's 'nRanks N' line, printed at init with "
            "NCCL_DEBUG_SUBSYS including INIT)"
        )
    if not any(summary["channels"].values()):
        missing.append(
            "no connection line ('Channel ... via ...', printed at init by a communicator of "
            "two or more ranks)"
        )
    if not summary["tuning"]["calls"]:
        missing.append("no per-call TUNING line (NCCL_DEBUG_SUBSYS including TUNING)")
    return missing


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


# Requests NCCL_ALGO and NCCL_PROTO may name, beyond the display names: "CollNet" (2.5-2.13)
# meant either CollNet algorithm.
_REQUEST_ALIASES = {"collnet": {"CollNetDirect", "CollNetChain"}}


def _parse_request(value: str, names: tuple[str, ...]) -> dict[str | None, set[str]]:
    """Allowed names per collective (lower case; None for all) from an NCCL_ALGO/PROTO value.

    Follows parseList in src/graph/tuning.cc: ``;``-separated entries, each ``func:list`` or
    (first only) ``list``; a list is comma-separated, case-insensitive, ``^`` excludes; a
    later entry overrides an earlier one for its collective. Names NCCL does not know are
    ignored; an entry left with nothing known to allow is dropped (nothing to judge by)."""
    keys = {_key(name): {name} for name in names}
    if names == ALGORITHMS:
        keys.update(_REQUEST_ALIASES)
    rules: dict[str | None, set[str]] = {}
    for entry in filter(str.strip, value.split(";")):
        prefix, _, items = entry.rpartition(":")
        items = items.strip()
        exclude = items.startswith("^")
        chosen: set[str] = set()
        for item in items.lstrip("^").split(","):
            chosen |= keys.get(_key(item), set())
        allowed = set(names) - chosen if exclude else chosen
        scope = prefix.strip().lower() or None
        if allowed:
            rules[scope] = allowed
        else:
            rules.pop(scope, None)
    return rules


def _plural(n: int) -> str:
    return "call" if n == 1 else "calls"


def requested_vs_used(summary: dict[str, Any], requested: dict[str, str]) -> list[str]:
    """One sentence per NCCL_ALGO / NCCL_PROTO request NCCL did not honour, from the TUNING counts.

    ``requested`` holds the variables the job set, e.g. ``{"NCCL_ALGO": "Tree"}``; values are
    read as NCCL reads them: case-insensitive, ``^`` to exclude, and the per-collective form of
    2.24+ (``allreduce:tree;broadcast:ring``), judged for each collective it names against the
    calls of that collective. Other variables are not judged. Empty when every call used an
    allowed algorithm or protocol, and when the summary has no TUNING lines to judge from."""
    tuning = summary.get("tuning") or {}
    if not tuning.get("calls"):
        return []
    by_collective: dict[str, dict[str, dict[str, int]]] = tuning.get("by_collective", {})
    sentences = []
    for variable, kind, names in (
        ("NCCL_ALGO", "algorithms", ALGORITHMS),
        ("NCCL_PROTO", "protocols", PROTOCOLS),
    ):
        value = requested.get(variable)
        if value is None or not value.strip():
            continue
        rules = _parse_request(value, names)
        if not rules:
            continue
        # Calls whose line names no collective (2.20-2.22) count in the totals only.
        unnamed = Counter(tuning[kind])
        for entry in by_collective.values():
            unnamed.subtract(entry[kind])
        scopes: list[tuple[str | None, dict[str, int]]] = [
            (name, entry[kind]) for name, entry in by_collective.items()
        ]
        scopes.append((None, {k: v for k, v in unnamed.items() if v > 0}))
        parts = []
        for collective, counts in scopes:
            allowed = rules.get(collective.lower() if collective else None, rules.get(None))
            if not counts or allowed is None or (collective is None and None not in rules):
                continue
            total = sum(counts.values())
            other = {name: n for name, n in counts.items() if name not in allowed}
            if other:
                used = " and ".join(f"{name} for {n}" for name, n in other.items())
                what = f"{collective} {_plural(total)}" if collective else _plural(total)
                parts.append(f"{used} of {total} {what}")
        if parts:
            sentences.append(f"{variable}={value} was requested but NCCL ran " + "; ".join(parts))
    return sentences


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m linkbench.nccl_log",
        description="Summarise NCCL INFO logs: version, channels per transport, NVLS channels, "
        "algorithms and protocols per call (TUNING).",
    )
    parser.add_argument("files", nargs="+", help="NCCL debug logs (NCCL_DEBUG=INFO output)")
    args = parser.parse_args(argv)
    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        print(f"no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    summary = parse_files(args.files)
    json.dump(summary, sys.stdout, indent=2)
    print()
    if summary["lacks"]:
        print(f"{', '.join(args.files)}: {'; '.join(summary['lacks'])}.", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
