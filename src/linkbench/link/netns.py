"""Making and removing one run's emulated network (:mod:`linkbench.link.emulated`).

Made with iproute2's ``ip`` and ``tc``, the reference tools for these netlink calls, each
call bounded by a timeout. pyroute2 (pure-Python netlink) was tried first and dropped: its
0.9 requests have no timeout, and one waited forever here for the acknowledgement of a veth
pair that the kernel had made (once in a few dozen networks), which would hang a sweep.
``tc``'s own refusals (``Specified qdisc kind is unknown``) are passed on as they are.

Every name carries the run's token (``linkbench-<token>-switch``, ``linkbench-<token>-rank<N>``),
and the process that made them holds an exclusive ``flock`` on ``/run/linkbench/<token>.lock``
while they exist. When the run ends in any way, :class:`Network` kills what still runs in its
namespaces and removes them. A launcher killed with ``kill -9`` cannot; its lock dies with
it, so the next :class:`Network` (or :func:`sweep_stale`) finds namespaces whose lock nobody
holds, stops the processes left in them and removes them. A namespace whose lock is held
belongs to a live job and is never touched.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from linkbench.link.emulated import MTU, PREFIX, SUBNET, LinkSpec, address

LOCK_DIR = Path("/run/linkbench")
TBF_LATENCY = "100ms"  # how long a packet may wait in the token bucket's queue
BURST_S = 0.002  # the bucket holds 2 ms of the rate (256 KB at 1 Gbit/s)
NETEM_LIMIT = 10_000  # packets netem may hold (its default 1,000 drops at long delays)
CALL_TIMEOUT_S = 20.0


class LinkError(RuntimeError):
    """``ip`` or ``tc`` refused a call; the message is its own."""


def run(*args: str) -> str:
    """Run one ``ip``/``tc`` command; its output, or LinkError with its error text."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=CALL_TIMEOUT_S)
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


def _lock(token: str, blocking: bool) -> int | None:
    """An open, exclusively locked descriptor of the token's lock file (None: held)."""
    LOCK_DIR.mkdir(parents=True, exist_ok=True)
    fd = os.open(LOCK_DIR / f"{token}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _ours() -> dict[str, list[str]]:
    """linkbench's namespaces on this host, by token."""
    found: dict[str, list[str]] = {}
    for entry in json.loads(run("ip", "-j", "netns", "list") or "[]"):
        parts = entry["name"].split("-")
        if len(parts) == 3 and parts[0] == PREFIX:
            found.setdefault(parts[1], []).append(entry["name"])
    return found


def _remove(names: list[str]) -> list[int]:
    """Kill every process in the namespaces, then remove them; returns the pids killed."""
    present = {n for token_names in _ours().values() for n in token_names}
    killed = []
    for name in (n for n in names if n in present):
        for pid in map(int, run("ip", "netns", "pids", name).split()):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
        run("ip", "netns", "delete", name)
    return killed


def sweep_stale() -> list[str]:
    """Remove the namespaces of runs whose launcher is gone (its lock is free), and stop the
    processes left in them; returns one line per run removed."""
    removed = []
    for token, names in sorted(_ours().items()):
        fd = _lock(token, blocking=False)
        if fd is None:
            continue  # a live job's
        try:
            killed = _remove(names)
            (LOCK_DIR / f"{token}.lock").unlink(missing_ok=True)
        finally:
            os.close(fd)
        what = f"{len(names)} namespace(s) of run {token}"
        removed.append(what + (f" and {len(killed)} process(es) left in them" if killed else ""))
    return removed


class Network:
    """A run's namespaces, bridge and shaped veth pairs, from ``with`` to its end."""

    def __init__(self, spec: LinkSpec, sweep: bool = True) -> None:
        self.spec = spec
        self.sweep = sweep
        self.stale: list[str] = []
        self._lock: int | None = None

    def __enter__(self) -> Network:
        if self.sweep:
            self.stale = sweep_stale()
        self._lock = _lock(self.spec.token, blocking=True)
        try:
            self._make()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            _remove(self.spec.namespaces)
        finally:
            if self._lock is not None:
                (LOCK_DIR / f"{self.spec.token}.lock").unlink(missing_ok=True)
                os.close(self._lock)
                self._lock = None

    def _make(self) -> None:
        spec, switch = self.spec, self.spec.switch
        for name in spec.namespaces:
            run("ip", "netns", "add", name)
        run("ip", "-n", switch, "link", "add", "switch", "type", "bridge")
        run("ip", "-n", switch, "link", "set", "switch", "up")
        for rank in range(spec.ranks):
            ns, port = spec.rank_namespace(rank), f"port{rank}"
            run("ip", "-n", switch, "link", "add", port, "mtu", str(MTU), "type", "veth",
                "peer", "name", spec.ifname, "mtu", str(MTU), "netns", ns)  # fmt: skip
            run("ip", "-n", switch, "link", "set", port, "master", "switch", "up")
            self._shape(switch, port, uplink=False)
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "-n", ns, "addr", "add", f"{address(rank)}/{SUBNET.prefixlen}",
                "dev", spec.ifname)  # fmt: skip
            run("ip", "-n", ns, "link", "set", spec.ifname, "up")
            self._shape(ns, spec.ifname, uplink=True)

    def _shape(self, ns: str, device: str, uplink: bool) -> None:
        """The rate on this end's egress; on a rank's uplink, the delay before it."""
        spec = self.spec
        rate_bytes = spec.rate_gbit_s * 1e9 / 8
        bucket = ["tbf", "rate", f"{round(spec.rate_gbit_s * 1e6)}kbit",
                  "burst", str(max(64 * 1024, int(rate_bytes * BURST_S))),
                  "latency", TBF_LATENCY]  # fmt: skip
        qdisc = ("tc", "-n", ns, "qdisc", "add", "dev", device)
        if uplink and (spec.delay_ms or spec.jitter_ms):
            run(*qdisc, "root", "handle", "1:", "netem", "limit", str(NETEM_LIMIT),
                "delay", f"{spec.delay_ms}ms", f"{spec.jitter_ms}ms")  # fmt: skip
            run(*qdisc, "parent", "1:1", "handle", "10:", *bucket)
        else:
            run(*qdisc, "root", "handle", "1:", *bucket)

    def counters(self) -> list[dict[str, Any]]:
        """Each rank's interface counters (bytes and packets each way, drops) so far."""
        out = []
        for rank in range(self.spec.ranks):
            ns = self.spec.rank_namespace(rank)
            shown = json.loads(run("ip", "-n", ns, "-s", "-j", "link", "show", self.spec.ifname))
            stats = shown[0].get("stats64", {})
            tx, rx = stats.get("tx", {}), stats.get("rx", {})
            out.append(
                {
                    "rank": rank,
                    "tx_bytes": tx.get("bytes", 0),
                    "rx_bytes": rx.get("bytes", 0),
                    "tx_packets": tx.get("packets", 0),
                    "rx_packets": rx.get("packets", 0),
                    "tx_dropped": tx.get("dropped", 0),
                }
            )
        return out


def new_spec(rate_gbit_s: float, delay_ms: float, jitter_ms: float, ranks: int) -> LinkSpec:
    """A run's link with a fresh token."""
    return LinkSpec(secrets.token_hex(4), rate_gbit_s, delay_ms, jitter_ms, ranks)
