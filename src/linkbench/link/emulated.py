"""An emulated interconnect: every rank in a network namespace of its own, on a link of set rate.

``interconnect=emulated`` puts each rank of a job in its own Linux network namespace, joined
to the others' through one bridge (a star through one switch) by a veth pair whose two ends
are each shaped to ``interconnect.rate_gbit_s`` by a token bucket (``tbf``), so each rank's
link carries that rate each way; ``interconnect.delay_ms`` and ``jitter_ms`` add a one-way
delay between two ranks (``netem`` on each rank's uplink; kernels built without netem refuse
them). The rendezvous (a TCPStore on rank 0's emulated address) and every collective cross
these links and nothing else: the namespaces have no other route, and gloo and NCCL are told
the interface by name.

This module holds what both processes need: the link's description (:class:`LinkSpec`,
handed to the workers in the plan), the arithmetic of what the link lets through (and of
the rates it can be set to: :func:`rate_problem`, which the config's checks call, and the
link probe's time), entering a rank's namespace (recorded first, :mod:`linkbench.link.records`),
and the check of a worker's own sockets. Making and removing the namespaces is
:mod:`linkbench.link.netns`, with iproute2.
"""

from __future__ import annotations

import ctypes
import ipaddress
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linkbench.link.records import NETNS_DIR, namespace, record_process

# The private network of a job's emulated links; each job has its own namespaces, so every
# job may use the same addresses.
SUBNET = ipaddress.IPv4Network("10.77.0.0/16")
STORE_PORT = 29500  # free in a namespace nobody else uses
MTU = 1500
# Bytes on the wire per full TCP segment: the payload (MSS, MTU - 20 IP - 32 TCP with
# timestamps) plus the IP and TCP headers and the 14-byte Ethernet header tbf also counts.
MSS = MTU - 20 - 32
WIRE_PER_SEGMENT = MTU + 14
MAX_RATE_GBIT_S = 400.0  # a 400 Gbit/s NIC; a host's veth pairs carry far less (docs/emulated.md)
# tc's token bucket counts whole bytes per second: 8 bit/s is the slowest rate it expresses.
TC_MIN_RATE_GBIT_S = 8e-9
# Each end's token bucket holds BURST_S of the rate (at least MIN_BURST_BYTES): after an idle
# spell it passes that much at once, faster than the rate.
BURST_S = 0.002
MIN_BURST_BYTES = 64 * 1024
# The link probe every emulated job runs before its task (linkbench.worker.emulated.measure):
# one untimed all_reduce call of PROBE_BYTES, then a window of back-to-back timed ones, at
# least PROBE_MIN_CALLS and at most PROBE_MAX_CALLS: enough that each link carries
# 1/BUCKET_SHARE bursts in the window, so a full bucket adds at most BUCKET_SHARE to the rate
# read (bytes through a token bucket in time t are at most burst + rate x t).
PROBE_BYTES = 8 << 20
PROBE_MIN_CALLS = 2
PROBE_MAX_CALLS = 32
BUCKET_SHARE = 0.005
# A bus bandwidth more than this share above what the link carries as data is a measurement
# error (a burst the bucket let through at once, or a timer's), never the link's rate.
LIMIT_TOLERANCE = 0.01
# The probe of the path inside a node (a node's ranks over its loopback, unshaped: no bucket
# to outlast), all nodes at once, as their steps run: one untimed call, then these.
NODE_PROBE_CALLS = 8
PROBE_LIMIT_S = 60.0  # the longest the probe may take: a slower link is refused before start
# Below this share of what the rate lets through, the probe's measurement is warned about:
# the host does not deliver the rate set.
SHORTFALL_SHARE = 0.8


def payload_gb_s(rate_gbit_s: float) -> float:
    """GB/s (1e9 bytes) of data a link of ``rate_gbit_s`` carries in full TCP segments: the
    rate less the headers every segment carries (95.6 % at MTU 1500)."""
    return rate_gbit_s / 8 * MSS / WIRE_PER_SEGMENT


def burst_bytes(rate_gbit_s: float) -> int:
    """The token bucket's size at ``rate_gbit_s``: BURST_S of the rate, at least
    MIN_BURST_BYTES."""
    return max(MIN_BURST_BYTES, int(rate_gbit_s * 1e9 / 8 * BURST_S))


def _link_bytes_per_call(ranks: int) -> float:
    """Bytes each rank's link carries each way per all_reduce of PROBE_BYTES (a ring)."""
    return PROBE_BYTES * 2 * (ranks - 1) / ranks


def probe_calls(rate_gbit_s: float, ranks: int) -> int:
    """The link probe's timed calls: enough that a full bucket adds at most BUCKET_SHARE."""
    if ranks < 2:
        return PROBE_MIN_CALLS
    wanted = burst_bytes(rate_gbit_s) / BUCKET_SHARE / _link_bytes_per_call(ranks)
    return min(PROBE_MAX_CALLS, max(PROBE_MIN_CALLS, math.ceil(wanted)))


def probe_estimate_s(rate_gbit_s: float, ranks: int) -> float:
    """The least time the link probe takes on ``ranks`` ranks joined by links of
    ``rate_gbit_s``: each rank's link carries 2(n-1)/n of each all_reduce's bytes each way
    (a ring), in full segments; one rank has no link to probe."""
    if ranks < 2:
        return 0.0
    link_bytes = (probe_calls(rate_gbit_s, ranks) + 1) * _link_bytes_per_call(ranks)
    return link_bytes / (payload_gb_s(rate_gbit_s) * 1e9)


def min_rate_gbit_s(ranks: int) -> float:
    """The slowest rate, rounded up to two digits, whose probe on ``ranks`` ranks takes at
    most PROBE_LIMIT_S."""
    # So slow a link's bucket is MIN_BURST_BYTES: the probe makes its fewest calls.
    at_1_gbit_s = (PROBE_MIN_CALLS + 1) * _link_bytes_per_call(max(ranks, 2)) / payload_gb_s(1.0)
    exact = max(TC_MIN_RATE_GBIT_S, at_1_gbit_s / 1e9 / PROBE_LIMIT_S)
    step = 10 ** (math.floor(math.log10(exact)) - 1)
    return round(math.ceil(exact / step) * step, 12)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{math.ceil(seconds)} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


# What keeps NCCL's traffic on the emulated link: every other transport off, sockets only
# (interconnect=emulated sets them, linkbench.config.links.EmulatedInterconnect; an override
# that undoes one leaves the link).
NCCL_LINK_ONLY = {
    "NCCL_P2P_DISABLE": "1",
    "NCCL_SHM_DISABLE": "1",
    "NCCL_IB_DISABLE": "1",
    "NCCL_NVLS_ENABLE": "0",
    "NCCL_NET": "Socket",
}


def arm_override_problem(expected_transport: str, env: dict[str, str]) -> str | None:
    """Why an emulated arm's transport or NCCL variables no longer keep its traffic on the
    link (an override of interconnect.expected_transport or interconnect.env), or None."""
    if expected_transport not in ("NET", "any"):
        return (
            f"interconnect.expected_transport={expected_transport} contradicts "
            "interconnect=emulated, whose traffic crosses the link over sockets (NET); drop "
            "the override, or choose another interconnect."
        )
    for name, wanted in NCCL_LINK_ONLY.items():
        if name in env and str(env[name]) != wanted:
            return (
                f"interconnect.env.{name}={env[name]} lets NCCL leave the emulated link (the arm "
                f"sets {name}={wanted}); drop the override, or choose another interconnect."
            )
    return None


def rate_problem(
    rate_gbit_s: float | None,
    ranks: int = 2,
    key: str = "interconnect.rate_gbit_s",
    example: str = "interconnect.rate_gbit_s=1",
) -> str | None:
    """Why ``interconnect.rate_gbit_s`` (or the rate ``key`` names: a node's uplink, with an
    ``example`` of a rate that works) cannot be emulated for ``ranks`` ranks (None: it can):
    not a rate, above a NIC's, below what tc expresses, or so slow that the link probe would
    take more than PROBE_LIMIT_S. The config's checks call it with 2 ranks (the fewest with a
    link to probe); the network, before it is made, with the job's ranks."""
    key = f"{key}={rate_gbit_s}"
    if rate_gbit_s is None or not 0 < rate_gbit_s <= MAX_RATE_GBIT_S:
        return (
            f"{key} must be a rate above 0 and at most {MAX_RATE_GBIT_S:g} Gbit/s, e.g. {example}."
        )
    if rate_gbit_s < TC_MIN_RATE_GBIT_S:
        return (
            f"{key} is below the slowest rate tc can shape a link to (8 bit/s, "
            f"{TC_MIN_RATE_GBIT_S:g} Gbit/s); set at least {min_rate_gbit_s(ranks):g} Gbit/s, "
            f"e.g. {example}."
        )
    probe_s = probe_estimate_s(rate_gbit_s, ranks)
    if probe_s > PROBE_LIMIT_S:
        return (
            f"{key} would hold the link probe ({probe_calls(rate_gbit_s, ranks) + 1} all_reduce "
            f"calls of {PROBE_BYTES >> 20} MiB over {ranks} ranks, before the task) for about "
            f"{_duration(probe_s)}, more than the {PROBE_LIMIT_S:.0f} s allowed; set at least "
            f"{min_rate_gbit_s(ranks):g} Gbit/s, e.g. {example}."
        )
    return None


def uplink_key(node: int) -> str:
    """Node ``node``'s entry of ``interconnect.uplink_rates_gbit_s``, as a sentence names it."""
    return f"interconnect.uplink_rates_gbit_s[{node}]"


def rate_warning(spec: LinkSpec, measured_busbw_gb_s: float) -> str | None:
    """A sentence when the link probe measured less than SHORTFALL_SHARE of what the slowest
    uplink lets through (a ring all-reduce runs at its slowest link's pace; the host cannot
    deliver the rate set); None otherwise."""
    expected = payload_gb_s(spec.slowest_gbit_s)
    share = measured_busbw_gb_s / expected
    if spec.node_count < 2 or share >= SHORTFALL_SHARE:
        return None
    delay = ", or the delay's round trips," if spec.delay_ms or spec.jitter_ms else ""
    return (
        f"the link probe measured {measured_busbw_gb_s:.4g} GB/s, {share:.1%} of the "
        f"{expected:.4g} GB/s that {spec.slowest_setting()} lets through: this host{delay} "
        "cannot deliver the rate set, so the link is slower than its setting says; lower "
        "interconnect.rate_gbit_s below what the host pushes unshaped (docs/emulated.md)."
    )


def above_limit(spec: LinkSpec, busbw_gb_s: float, what: str) -> str | None:
    """A sentence when ``what`` (a bus bandwidth on this link) reads more than LIMIT_TOLERANCE
    above what the link carries as data (its slowest uplink's, which paces a ring): a
    measurement error, not a rate; None otherwise."""
    limit = payload_gb_s(spec.slowest_gbit_s)
    if spec.node_count < 2 or busbw_gb_s <= limit * (1 + LIMIT_TOLERANCE):
        return None
    return (
        f"{what} read {busbw_gb_s:.4g} GB/s, {busbw_gb_s / limit:.1%} of the {limit:.4g} GB/s "
        f"that {spec.slowest_setting()} carries as data: more than the "
        "link can carry, so a measurement error (a burst the token bucket let through at once, "
        "or a timer's), not the link's rate"
    )


def address(node: int) -> str:
    """Node ``node``'s address on the job's emulated network."""
    return str(SUBNET.network_address + 1 + node)


@dataclass(frozen=True)
class LinkSpec:
    """One run's emulated network, as the workers need it (picklable, part of the plan): the
    world's ``ranks`` in ``nodes`` nodes of equal size (0: one node per rank), rank r on node
    r // (ranks / nodes). A node is one namespace: its ranks reach each other through its
    loopback (the node's own fast path, unshaped), and the node reaches the others through
    its uplink to the switch, shaped to the rate each way."""

    token: str
    """This run's identity in every name it makes (8 hex digits)."""
    rate_gbit_s: float
    delay_ms: float
    jitter_ms: float
    ranks: int
    nodes: int = 0
    uplink_rates: tuple[tuple[int, float], ...] = ()
    """(node, Gbit/s) of the nodes whose uplink has a rate of its own, each way; the others
    run at ``rate_gbit_s``."""

    @property
    def node_count(self) -> int:
        return self.nodes or self.ranks

    def uplink_gbit_s(self, node: int) -> float:
        """Node ``node``'s uplink rate, each way."""
        return dict(self.uplink_rates).get(node, self.rate_gbit_s)

    @property
    def slowest_gbit_s(self) -> float:
        """The slowest uplink's rate: what a ring through every node runs at."""
        return min(self.uplink_gbit_s(n) for n in range(self.node_count))

    def slowest_setting(self) -> str:
        """The override that set the slowest uplink's rate, for a sentence."""
        slow = [n for n, rate in self.uplink_rates if rate == self.slowest_gbit_s]
        if slow and self.slowest_gbit_s < self.rate_gbit_s:
            return f"{uplink_key(slow[0])}={self.slowest_gbit_s:g}"
        return f"interconnect.rate_gbit_s={self.rate_gbit_s:g}"

    @property
    def ranks_per_node(self) -> int:
        return self.ranks // self.node_count

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def node_ranks(self, node: int) -> list[int]:
        return list(range(node * self.ranks_per_node, (node + 1) * self.ranks_per_node))

    @property
    def ifname(self) -> str:
        """The uplink's interface in every node's namespace (15 characters at most)."""
        return f"lb{self.token}"

    @property
    def switch(self) -> str:
        return namespace(self.token, "switch")

    def node_namespace(self, node: int) -> str:
        return namespace(self.token, f"node{node}")

    def rank_namespace(self, rank: int) -> str:
        return self.node_namespace(self.node_of(rank))

    def rank_address(self, rank: int) -> str:
        """Rank ``rank``'s address: its node's."""
        return address(self.node_of(rank))

    @property
    def namespaces(self) -> list[str]:
        return [self.switch, *(self.node_namespace(n) for n in range(self.node_count))]

    @property
    def store_address(self) -> str:
        return address(0)

    def settings(self) -> dict[str, Any]:
        """The link as ``result.json`` and the manifest record it."""
        return {
            "rate_gbit_s": self.rate_gbit_s,
            "delay_ms": self.delay_ms,
            "jitter_ms": self.jitter_ms,
            "topology": "star",
            "nodes": self.node_count,
            "ranks_per_node": self.ranks_per_node,
            "mtu": MTU,
            "payload_gb_s": payload_gb_s(self.rate_gbit_s),
            **(
                {"uplink_rates_gbit_s": {str(n): r for n, r in self.uplink_rates},
                 "slowest_gbit_s": self.slowest_gbit_s}
                if self.uplink_rates else {}
            ),
        }  # fmt: skip


CLONE_NEWNET = 0x40000000
_entered: list[LinkSpec] = []  # the link this process entered (a worker's: one at most)


def enter(spec: LinkSpec, rank: int) -> None:
    """Move this process (a worker, before it opens any socket) into its rank's namespace and
    name the interface gloo and NCCL must use. It records itself first
    (:func:`~linkbench.link.records.record_process`): a sweep stops only the processes a run
    recorded, once their launcher is gone."""
    record_process(spec.token, rank)
    fd = os.open(f"{NETNS_DIR}/{spec.rank_namespace(rank)}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if hasattr(os, "setns"):  # Python 3.12+
            os.setns(fd, CLONE_NEWNET)
        else:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.setns(fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(
                    errno, f"setns into {spec.rank_namespace(rank)}: {os.strerror(errno)}"
                )
    finally:
        os.close(fd)
    os.environ["GLOO_SOCKET_IFNAME"] = spec.ifname
    os.environ["NCCL_SOCKET_IFNAME"] = spec.ifname
    _entered[:] = [spec]


def entered() -> LinkSpec | None:
    """The link this process entered with :func:`enter` (None: none)."""
    return _entered[0] if _entered else None


def _hex_address(text: str) -> str:
    """An address of /proc/net/tcp or tcp6 (little-endian 32-bit words in hex) as text; an
    IPv4 address mapped into IPv6 (``::ffff:10.77.0.1``, as a dual-stack listener such as the
    rendezvous store's accepts it) as its IPv4 text."""
    raw = b"".join(int(text[i : i + 8], 16).to_bytes(4, "little") for i in range(0, len(text), 8))
    if len(raw) == 4:
        return str(ipaddress.IPv4Address(raw))
    six = ipaddress.IPv6Address(raw)
    return str(six.ipv4_mapped or six)


LISTEN = "0A"  # the TCP state a listening socket shows in /proc/net/tcp


def own_connections(pid: int | str = "self") -> list[tuple[str, str]]:
    """(local, remote) addresses of this process's TCP connections, read from its own
    sockets (/proc/<pid>/fd) and its namespace's tables (/proc/<pid>/net/tcp and tcp6). Every
    state but listening counts: a connection the peer has closed (CLOSE_WAIT) ran all the
    same. Rank 0 reads them twice, after the link probe (every rank's connections open) and
    after its task (those made since), so a faster rank that has left by then hides none."""
    inodes = set()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for name in ("tcp", "tcp6"):  # IPv4, and IPv6 with IPv4 mapped into it
        table = Path(f"/proc/{pid}/net/{name}")
        if not table.exists():  # a kernel without IPv6
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state != LISTEN and inode in inodes:
                found.append(
                    (_hex_address(local.split(":")[0]), _hex_address(remote.split(":")[0]))
                )
    return found


def check_connections(connections: list[tuple[str, str]], spec: LinkSpec, rank: int) -> dict:
    """Whether rank ``rank``'s connections to ranks of other nodes all run from its node's
    emulated address to theirs, over the link: the transport check of an emulated arm. A
    connection to its own node's address (the rendezvous store rank 0 serves to itself, the
    ranks of its node) stays in the node's namespace and is counted apart."""
    mine = spec.rank_address(rank)
    peers = {address(n) for n in range(spec.node_count)} - {mine}
    to_peers = [c for c in connections if c[0] == mine and c[1] in peers]
    own = [c for c in connections if c == (mine, mine)]
    off = sorted({f"{a}->{b}" for a, b in connections if (a, b) not in {*to_peers, *own}})
    out: dict[str, Any] = {"to_peers": len(to_peers), "to_itself": len(own), "address": mine}
    if off:
        return {**out, "verified": False, "reason": f"connections off the link: {off}"}
    if spec.node_count > 1 and not to_peers:
        return {
            **out,
            "verified": False,
            "reason": f"rank {rank} had no connection to another node",
        }
    return {
        **out,
        "verified": True,
        "reason": f"all {len(to_peers)} TCP connections of rank {rank} to other nodes ran over "
        f"{spec.ifname}, between emulated addresses",
    }
