"""Making and removing one run's emulated network (:mod:`linkbench.link.emulated`).

Made with iproute2's ``ip`` and ``tc``, the reference tools for these netlink calls, each
call bounded by a timeout. pyroute2 (pure-Python netlink) was tried first and dropped: its
0.9 requests have no timeout, and one waited forever here for the acknowledgement of a veth
pair that the kernel had made (once in a few dozen networks), which would hang a sweep.
``tc``'s own refusals (``Specified qdisc kind is unknown``) are passed on as they are.

Every name carries the run's token (``linkbench-<token>-switch``, ``linkbench-<token>-node<N>``).
A run touches only what a run recorded that it made (:mod:`linkbench.link.records`): before
it makes a namespace, :class:`Network` records it, with the boot id and the launcher's pid
and start time, and adds the namespace's identity once it is made; each worker records
itself before it enters its namespace. When the run ends in any way, :class:`Network` stops
the processes it recorded (and theirs) and removes the namespaces it made. A launcher killed
with ``kill -9`` cannot; the next :class:`Network` (or :func:`sweep_stale`) finds its record,
sees that no process of its pid and start time runs, and removes what it recorded. A
namespace that no record names (a look-alike name, or one another tool made) and a process
that no run recorded are never touched; a live launcher's are never touched either.

A stop signal (SIGINT, SIGTERM, SIGHUP) from the first step of making a network to the last
of removing it ends as it does while the workers run: as the elastic agent's
``SignalException``, which the job records as a stop. While namespaces are being made or
removed it is held back, so that each step is recorded or undone, and raised after.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from linkbench.errors import ConfigError
from linkbench.link.emulated import MTU, SUBNET, LinkSpec, address, burst_bytes, rate_problem
from linkbench.link.records import (
    RECORD_DIR,
    NetworkRecord,
    Process,
    RecordError,
    forget,
    forget_strays,
    namespace_inode,
    networks,
    parent,
    processes,
    start_time,
)

TBF_LATENCY = "100ms"  # how long a packet may wait in the token bucket's queue
NETEM_LIMIT = 10_000  # packets netem may hold (its default 1,000 drops at long delays)
CALL_TIMEOUT_S = 20.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
ANCESTRY_DEPTH = 64  # how far up a process's parents are followed to a recorded worker


class LinkError(RuntimeError):
    """``ip`` or ``tc`` refused a call; the message is its own."""


def run(*args: str) -> str:
    """Run one ``ip``/``tc`` command; its output, or LinkError with its error text. The
    command runs in a session of its own, so a terminal's Ctrl-C reaches this process (which
    finishes the step) and not the command half-way."""
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, timeout=CALL_TIMEOUT_S, start_new_session=True
        )
    except subprocess.TimeoutExpired:
        raise LinkError(f"`{' '.join(args)}` did not answer within {CALL_TIMEOUT_S:g} s") from None
    if done.returncode != 0:
        error = (done.stderr or done.stdout).strip().replace("\n", " ")
        raise LinkError(f"`{' '.join(args)}` failed: {error}")
    return done.stdout


def rights_problem() -> str | None:
    """Why this process cannot make network namespaces (None: it can)."""
    if not sys.platform.startswith("linux"):
        return f"interconnect=emulated needs Linux network namespaces; this is {sys.platform}."
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return (
            f"interconnect=emulated needs iproute2's ip and tc ({' and '.join(missing)} not "
            "found); install iproute2 (apt install iproute2)."
        )
    if os.geteuid() != 0 and not _has_capabilities(12, 21):
        return (
            "interconnect=emulated makes network namespaces, which needs root (CAP_NET_ADMIN "
            "and CAP_SYS_ADMIN); run as root, e.g. sudo .venv/bin/python run.py ..., or in a "
            "container started with --cap-add NET_ADMIN --cap-add SYS_ADMIN."
        )
    return None


def _has_capabilities(*bits: int) -> bool:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("CapEff:"):
                effective = int(line.split()[1], 16)
                return all(effective >> bit & 1 for bit in bits)
    return False


@functools.cache
def emulation_problem(delay: bool) -> str | None:
    """Why this machine cannot emulate a link (with a delay if ``delay``); None: it can.
    Checked once per process by making, shaping and removing a network of one rank."""
    problem = rights_problem()
    if problem:
        return problem
    spec = LinkSpec(secrets.token_hex(4), 1.0, 1.0 if delay else 0.0, 0.0, 1)
    try:
        with Network(spec, sweep=False):
            pass
    except RecordError as error:
        return (
            f"interconnect=emulated could not write its record of the namespaces it makes, "
            f"{error}, as user {os.geteuid()} may write neither {RECORD_DIR} nor /run/netns "
            "(where namespaces are named); run as root, e.g. sudo .venv/bin/python run.py ..., "
            "or add CAP_DAC_OVERRIDE to CAP_NET_ADMIN and CAP_SYS_ADMIN."
        )
    except LinkError as error:
        if "netns add" in str(error):
            return (
                f"interconnect=emulated could not make a network namespace here ({error}); run "
                "where root may (docker run --privileged, or --cap-add NET_ADMIN --cap-add "
                "SYS_ADMIN)."
            )
        if delay and "netem" in str(error):
            return (
                "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), so "
                "interconnect.delay_ms and interconnect.jitter_ms cannot be emulated here; "
                "set both to 0, or run on a kernel with sch_netem."
            )
        return f"interconnect=emulated could not shape a link here: {error}."
    return None


def _by_namespace() -> dict[int, list[int]]:
    """Every process this process may see, by the inode of its network namespace."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                inode = os.stat(f"/proc/{entry}/ns/net").st_ino
            except OSError:
                continue
            found.setdefault(inode, []).append(int(entry))
    return found


def _descends(pid: int, recorded: set[int]) -> bool:
    """Whether ``pid`` is a recorded process or one of its descendants (as the kernel says
    now: a process whose recorded parent has ended is no longer known as one)."""
    for _ in range(ANCESTRY_DEPTH):
        if pid in recorded:
            return True
        up = parent(pid)
        if up is None or up <= 1:
            return False
        pid = up
    return False


def _started_by(
    record: NetworkRecord, made: dict[str, int], inside: dict[int, list[int]]
) -> list[Process]:
    """The run's processes that still run: those its workers recorded (with their pid and
    start time), and the processes inside the namespaces it made that descend from one of
    them or from its launcher, while it runs (its own end: its workers are its children's).
    ``inside``: who runs in which namespace (:func:`_by_namespace`)."""
    recorded = [p for p in processes(record.token) if p.alive()]
    roots = {p.pid for p in recorded}
    if record.launcher.alive():
        roots.add(record.launcher.pid)
    found = list(recorded)
    for inode in made.values():
        for pid in inside.get(inode, []):
            started = start_time(pid)
            if pid not in roots and started is not None and _descends(pid, roots):
                found.append(Process(pid, started))
    return found


def _delete(name: str, inode: int) -> bool:
    """Remove namespace ``name`` if it is still the one made (``inode``); whether it was."""
    if namespace_inode(name) != inode:
        return False
    try:
        run("ip", "netns", "delete", name)
    except LinkError:
        if namespace_inode(name) == inode:
            raise
        return False  # removed meanwhile (another job's sweep)
    return True


def _remove(record: NetworkRecord) -> tuple[list[str], int, dict[str, list[int]]]:
    """Stop the processes the run started, remove the namespaces it made (those whose
    identity is the recorded one) except any that holds a process the run did not start
    (someone's own, entered with ip netns exec: left, and the run's record kept, so a later
    job removes it once that process has ended), then its records; the names removed, how
    many processes were stopped, and the namespaces left with the processes found in them."""
    made = record.made()
    inside = _by_namespace()  # one look at /proc: who runs in which namespace
    mine = _started_by(record, made, inside)
    killed = sum(process.kill() for process in mine)
    ours = {process.pid for process in mine}
    foreign = {
        name: pids
        for name, inode in made.items()
        if (pids := [pid for pid in inside.get(inode, []) if pid not in ours])
    }
    removed = [name for name, inode in made.items() if name not in foreign and _delete(name, inode)]
    if not foreign:
        forget(record.token)
    return removed, killed, foreign


def _describe(pid: int) -> str:
    """``pid 123 (its command line)``, as far as /proc tells."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        command = ""
    command = command.strip()
    return f"pid {pid}" + (f" ({command[:80]})" if command else "")


def sweep_stale(stop_point: Callable[[], None] = lambda: None) -> list[str]:
    """Remove what runs whose launcher is gone recorded that they made, and stop the
    processes they recorded; returns one line per run removed. A record from an earlier
    boot is dropped (what it names went with that boot); a live launcher's, and one from
    another pid namespace (whose pid means nothing here), are left. ``stop_point`` is
    called before each run (a stop held back is raised there)."""
    lines = []
    for record in networks():
        stop_point()
        state = record.launcher_state()
        if state in ("alive", "unknown"):
            continue
        if state == "other boot":
            forget(record.token)
            continue
        unconfirmed = [
            name
            for name, inode in record.namespaces.items()
            if inode is None and namespace_inode(name) is not None
        ]
        removed, killed, foreign = _remove(record)
        if not removed and not killed and not unconfirmed and not foreign:
            continue
        line = f"{len(removed)} namespace(s) of run {record.token}"
        line += f" and {killed} process(es) left in them" if killed else ""
        for name, pids in foreign.items():
            line += (
                f"; left alone, as it holds process(es) that run did not start: {name} with "
                f"{', '.join(_describe(pid) for pid in pids)} (end them, then ip netns delete "
                f"{name}, or the next emulated job removes it)"
            )
        if unconfirmed:
            line += (
                f"; left alone, as not recorded as made: {', '.join(unconfirmed)} "
                "(ip netns delete removes one)"
            )
        lines.append(line)
    forget_strays()
    return lines


def _stop(signum: int) -> BaseException:
    """A stop signal as the elastic agent raises it while the workers run, so a stop of the
    network's set-up ends the job as a stop of its training does (imported late: the
    config's checks use this module without torch)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException

    sigval = signal.Signals(signum)
    return SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)


class Network:
    """A run's namespaces, bridge and shaped veth pairs, from ``with`` to its end.

    Refused before anything is made (ConfigError) when the link probe would take too long
    for the run's ranks. Between ``with`` and its end, a stop signal raises the elastic
    agent's SignalException: at once while the network stands, and while it is being made
    or removed, after the step in progress (the namespaces are recorded before each is made,
    so a stop leaks none)."""

    def __init__(self, spec: LinkSpec, sweep: bool = True) -> None:
        self.spec = spec
        self.sweep = sweep
        self.stale: list[str] = []
        self._record: NetworkRecord | None = None
        self._previous: dict[int, Any] = {}
        self._holding = False
        self._pending: int | None = None

    def __enter__(self) -> Network:
        problem = rate_problem(self.spec.slowest_gbit_s, self.spec.ranks)
        if problem is not None:
            raise ConfigError(problem)
        self._holding = True
        self._catch_stops()
        try:
            if self.sweep:
                self.stale = sweep_stale(self._stop_point)
            self._stop_point()
            record = NetworkRecord.planned(self.spec.token, self.spec.namespaces)
            record.write(new=True)
            self._record = record
            self._make()
            self._stop_point()
        except BaseException:
            self._close()
            if self._pending is not None:  # the stop, or an error while a stop was held
                raise _stop(self._pending) from None
            raise
        self._holding = False
        return self

    def __exit__(self, kind: type[BaseException] | None = None, *rest: object) -> None:
        self._close()
        if self._pending is not None and kind is None:
            raise _stop(self._pending)

    def _catch_stops(self) -> None:
        """Stop signals to :meth:`_on_stop` (again at the end: the elastic agent sets its
        own while the workers run); the handlers found first are given back at the end."""
        if threading.current_thread() is not threading.main_thread():
            return  # Python sets handlers in the main thread only
        for signum in STOP_SIGNALS:
            previous = signal.signal(signum, self._on_stop)
            self._previous.setdefault(signum, previous)

    def _on_stop(self, signum: int, frame: FrameType | None) -> None:
        if self._holding:
            if self._pending is None:
                self._pending = signum
            return
        raise _stop(signum)

    def _stop_point(self) -> None:
        """Raise a stop that was held back."""
        if self._pending is not None:
            raise _stop(self._pending)

    def _close(self) -> None:
        """Remove what this network made (stops held back meanwhile) and give the stop
        signals back their handlers."""
        self._holding = True
        self._catch_stops()
        try:
            if self._record is not None:
                _remove(self._record)
                self._record = None
        finally:
            for signum, handler in self._previous.items():
                signal.signal(signum, handler)
            self._previous = {}

    def _call(self, *args: str) -> None:
        """One step of making the network, after a stop held back is raised."""
        self._stop_point()
        run(*args)

    def _add_namespace(self, name: str) -> None:
        """Make namespace ``name`` and record it (with its identity) as made."""
        assert self._record is not None
        if namespace_inode(name) is not None:
            raise LinkError(f"namespace {name} exists already; it is not this run's")
        self._call("ip", "netns", "add", name)
        self._record.namespaces[name] = namespace_inode(name)
        self._record.write()

    def _make(self) -> None:
        spec, switch, call = self.spec, self.spec.switch, self._call
        for name in spec.namespaces:
            self._add_namespace(name)
        call("ip", "-n", switch, "link", "add", "switch", "type", "bridge")
        call("ip", "-n", switch, "link", "set", "switch", "up")
        for node in range(spec.node_count):
            ns, port = spec.node_namespace(node), f"port{node}"
            call("ip", "-n", switch, "link", "add", port, "mtu", str(MTU), "type", "veth",
                 "peer", "name", spec.ifname, "mtu", str(MTU), "netns", ns)  # fmt: skip
            call("ip", "-n", switch, "link", "set", port, "master", "switch", "up")
            self._shape(switch, port, node, uplink=False)
            call("ip", "-n", ns, "link", "set", "lo", "up")
            call("ip", "-n", ns, "addr", "add", f"{address(node)}/{SUBNET.prefixlen}",
                 "dev", spec.ifname)  # fmt: skip
            call("ip", "-n", ns, "link", "set", spec.ifname, "up")
            self._shape(ns, spec.ifname, node, uplink=True)

    def _shape(self, ns: str, device: str, node: int, uplink: bool) -> None:
        """Node ``node``'s uplink rate on this end's egress; on the node's end, the delay
        before it."""
        spec, rate = self.spec, self.spec.uplink_gbit_s(node)
        bucket = ["tbf", "rate", f"{round(rate * 1e9)}bit", "burst", str(burst_bytes(rate)),
                  "latency", TBF_LATENCY]  # fmt: skip
        qdisc = ("tc", "-n", ns, "qdisc", "add", "dev", device)
        if uplink and (spec.delay_ms or spec.jitter_ms):
            self._call(*qdisc, "root", "handle", "1:", "netem", "limit", str(NETEM_LIMIT),
                       "delay", f"{spec.delay_ms}ms", f"{spec.jitter_ms}ms")  # fmt: skip
            self._call(*qdisc, "parent", "1:1", "handle", "10:", *bucket)
        else:
            self._call(*qdisc, "root", "handle", "1:", *bucket)

    def counters(self) -> list[dict[str, Any]]:
        """Each node's uplink: its interface counters (bytes and packets each way, drops) so
        far, and the token bucket's own on each end (``tc -s qdisc``: the bytes it passed,
        the packets it held back for the rate, ``overlimits``, and dropped): the witness that
        the shaping happened."""
        out = []
        switch = self.spec.switch
        for node in range(self.spec.node_count):
            ns = self.spec.node_namespace(node)
            shown = json.loads(run("ip", "-n", ns, "-s", "-j", "link", "show", self.spec.ifname))
            stats = shown[0].get("stats64", {})
            tx, rx = stats.get("tx", {}), stats.get("rx", {})
            out.append(
                {
                    "node": node,
                    "ranks": self.spec.node_ranks(node),
                    "rate_gbit_s": self.spec.uplink_gbit_s(node),
                    "tx_bytes": tx.get("bytes", 0),
                    "rx_bytes": rx.get("bytes", 0),
                    "tx_packets": tx.get("packets", 0),
                    "rx_packets": rx.get("packets", 0),
                    "tx_dropped": tx.get("dropped", 0),
                    "shaper_out": _bucket(ns, self.spec.ifname),
                    "shaper_in": _bucket(switch, f"port{node}"),
                }
            )
        return out


def _bucket(ns: str, device: str) -> dict[str, int]:
    """The token bucket's counters on ``device``'s egress (bytes, packets, overlimits: the
    packets it held back for the rate, drops); {} without one."""
    for qdisc in json.loads(run("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", device)):
        if qdisc.get("kind") == "tbf":
            return {k: int(qdisc.get(k, 0)) for k in ("bytes", "packets", "overlimits", "drops")}
    return {}


def new_spec(
    rate_gbit_s: float,
    delay_ms: float,
    jitter_ms: float,
    ranks: int,
    nodes: int | None = None,
    uplink_rates: Mapping[int, float] | None = None,
) -> LinkSpec:
    """A run's link with a fresh token: ``ranks`` in ``nodes`` nodes (None: one per rank),
    the nodes in ``uplink_rates`` on uplinks of their own rate."""
    rates = tuple(sorted((int(n), float(r)) for n, r in (uplink_rates or {}).items()))
    return LinkSpec(
        secrets.token_hex(4), rate_gbit_s, delay_ms, jitter_ms, ranks, nodes or 0, rates
    )
