"""``interconnect/``: how the ranks reach each other, the link's option in one place: its
keys, their checks, and what the plan asks of it (:class:`LinkConfig`).

The arms that only choose NCCL's transport (``auto``, ``nvlink``, ``pcie``, ``socket``) are
option classes of NCCL variables, applied to this job's worker processes only; ``emulated``,
which makes the link itself and has settings of its own, is :class:`EmulatedInterconnect`.
The plan asks an option what it makes (:meth:`LinkConfig.link`), what this host lacks to make
it (:meth:`LinkConfig.survey`, asked once by the launcher, which gathers the facts) and
whether this job can run on it (:meth:`LinkConfig.check`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from linkbench.config.checks import require, require_not_negative
from linkbench.config.choices import InterconnectName, Transport
from linkbench.config.machine import Machine
from linkbench.link.emulated import (
    NCCL_LINK_ONLY,
    arm_override_problem,
    rate_problem,
    uplink_key,
)
from linkbench.link.netns import emulation_problem

if TYPE_CHECKING:
    from linkbench.config.facts import Facts
    from linkbench.config.schema import Config


@dataclass
class LinkConfig:
    """An ``interconnect/`` option: the machine's own path, chosen by NCCL variables, unless
    a subclass makes a link of its own."""

    name: InterconnectName = InterconnectName.auto
    description: str = ""
    expected_transport: Transport = Transport.any
    env: dict[str, str] = field(default_factory=dict)

    def link(self) -> EmulatedInterconnect | None:
        """The link this option makes (None: the machine's own)."""
        return None

    def survey(self, machine: Machine) -> str | None:
        """Why this host cannot make the link (None: it can, or there is none to make). It may
        try the host (the launcher asks it once, while gathering the facts; never the plan)."""
        return None

    def check(self, config: Config, facts: Facts, ranks: int) -> None:
        """Refuse, in one sentence naming the key, a job of ``ranks`` ranks this option cannot
        carry on this host (``facts.link_problem``: :meth:`survey`'s answer)."""


@dataclass
class AutoArm(LinkConfig):
    """``interconnect=auto`` (the default): NCCL's own choice."""

    name: InterconnectName = InterconnectName.auto
    description: str = "NCCL chooses the transport itself; linkbench sets no variable."


@dataclass
class NvlinkArm(LinkConfig):
    """``interconnect=nvlink``: peer-to-peer allowed, as NCCL's default has it."""

    name: InterconnectName = InterconnectName.nvlink
    description: str = (
        "NCCL peer-to-peer allowed (NCCL's default): between GPUs joined by NVLink, CUDA uses "
        "NVLink."
    )
    expected_transport: Transport = Transport.P2P
    env: dict[str, str] = field(default_factory=lambda: {"NCCL_P2P_DISABLE": "0"})


@dataclass
class PcieArm(LinkConfig):
    """``interconnect=pcie``: "NVLink off" (NCCL cannot switch off only NVLink)."""

    name: InterconnectName = InterconnectName.pcie
    description: str = (
        "NCCL cannot switch off only NVLink. With peer-to-peer disabled, traffic between GPUs "
        'is staged through host shared memory over PCIe (transport SHM): this is "NVLink '
        'off", not PCIe peer-to-peer. NVLink SHARP (NVLS) is disabled too, since the P2P '
        "switch does not gate it."
    )
    expected_transport: Transport = Transport.SHM
    env: dict[str, str] = field(
        default_factory=lambda: {"NCCL_P2P_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
    )


@dataclass
class SocketArm(LinkConfig):
    """``interconnect=socket``: NCCL's network transport over loopback sockets."""

    name: InterconnectName = InterconnectName.socket
    description: str = (
        "No peer-to-peer and no shared memory: NCCL's network transport over loopback "
        "sockets, the slowest path inside one host."
    )
    expected_transport: Transport = Transport.NET
    env: dict[str, str] = field(
        default_factory=lambda: {
            "NCCL_P2P_DISABLE": "1",
            "NCCL_SHM_DISABLE": "1",
            "NCCL_NVLS_ENABLE": "0",
        }
    )


@dataclass
class EmulatedInterconnect(LinkConfig):
    """``interconnect=emulated``: every rank (or every node of ranks) in a network namespace
    of its own, reaching the others through a link shaped to a rate this option sets
    (docs/emulated.md)."""

    name: InterconnectName = InterconnectName.emulated
    description: str = (
        "Every rank in a network namespace of its own, joined through one bridge by a veth "
        "pair shaped to interconnect.rate_gbit_s each way (tbf), with interconnect.delay_ms "
        "one way between ranks (netem). Collectives cross it over sockets: gloo's, or NCCL's "
        "NET/Socket transport (P2P, SHM, IB and NVLS off). Needs root; see docs/emulated.md."
    )
    expected_transport: Transport = Transport.NET
    env: dict[str, str] = field(default_factory=lambda: dict(NCCL_LINK_ONLY))
    rate_gbit_s: float = 1.0
    """Each rank's link (each node's uplink), each direction, in Gbit/s (1e9 bits/s)."""
    delay_ms: float = 0.0
    """One-way delay between two ranks, in ms (netem)."""
    jitter_ms: float = 0.0
    """The delay's random variation, in ms (netem)."""
    nodes: int | None = None
    """The world split into this many nodes of equal size; the ranks of a node share its
    namespace (an unshaped path inside the node) and each node reaches the others through its
    uplink, shaped to ``rate_gbit_s``. null: one node per rank."""
    uplink_rates_gbit_s: list[float] = field(default_factory=list)
    """Each node's uplink rate, each way, in Gbit/s, node 0 first: ``[1,1,1,0.5]`` is 4 nodes
    whose last runs at half the others' rate, a degraded link. Empty: every uplink at
    ``rate_gbit_s``."""

    def __post_init__(self) -> None:
        require(
            self.nodes is None or self.nodes >= 1,
            f"interconnect.nodes={self.nodes} must be 1 or more (or null: one node per rank); "
            "e.g. interconnect.nodes=2.",
        )
        problem = rate_problem(self.rate_gbit_s)  # above 0, at most a NIC's, probed in 60 s
        require(problem is None, str(problem))
        for node, rate in enumerate(self.uplink_rates_gbit_s):
            problem = rate_problem(rate, key=uplink_key(node), example=self._healed(node))
            require(problem is None, str(problem))
        require_not_negative("interconnect.", delay_ms=self.delay_ms, jitter_ms=self.jitter_ms)
        require(
            self.jitter_ms <= self.delay_ms,
            f"interconnect.jitter_ms={self.jitter_ms} varies the delay, so it must not exceed "
            f"interconnect.delay_ms={self.delay_ms}; lower it or raise the delay.",
        )

    def link(self) -> EmulatedInterconnect:
        return self

    def survey(self, machine: Machine) -> str | None:
        """Network namespaces, veth pairs and tc's token bucket (and netem, with a delay): made
        and removed once, as a test (:func:`linkbench.link.netns.emulation_problem`). Not
        under an outside launcher, which :meth:`check` refuses in a sentence of its own."""
        if machine.outside is not None:
            return None
        return emulation_problem(delay=bool(self.delay_ms or self.jitter_ms))

    def check(self, config: Config, facts: Facts, ranks: int) -> None:
        """It makes its ranks' namespaces itself, on this host, as root, at a rate its link
        probe can measure for this job's ``ranks`` within its time."""
        nodes = self.nodes
        require(
            nodes is None or nodes <= ranks,
            f"interconnect.nodes={nodes} is more nodes than this job's {ranks} rank(s); set at "
            f"most interconnect.nodes={ranks}, or more devices.",
        )
        require(
            nodes is None or ranks % nodes == 0,
            f"interconnect.nodes={nodes} does not split this job's {ranks} ranks into nodes of "
            f"equal size; choose a divisor of {ranks}, or devices= a multiple of {nodes}.",
        )
        problem = rate_problem(self.rate_gbit_s, ranks)
        require(problem is None, str(problem))
        count, rates = nodes or ranks, self.uplink_rates_gbit_s
        require(
            not rates or len(rates) == count,
            f"interconnect.uplink_rates_gbit_s={list(rates)} gives {len(rates)} rate(s), but this "
            f"job's link has {count} node(s): give one rate per node, node 0 first, e.g. "
            f"interconnect.uplink_rates_gbit_s=[{','.join(['1'] * (count - 1) + ['0.5'])}].",
        )
        for node, rate in enumerate(rates):
            problem = rate_problem(rate, ranks, key=uplink_key(node), example=self._healed(node))
            require(problem is None, str(problem))
        problem = arm_override_problem(str(self.expected_transport), dict(self.env))
        require(problem is None, str(problem))
        require(
            facts.machine.outside is None,
            "interconnect=emulated starts its ranks in network namespaces of its own and cannot "
            "run under torchrun or SLURM; run python run.py on one host without them.",
        )
        require(facts.link_problem is None, str(facts.link_problem))

    def _healed(self, node: int) -> str:
        """The override of ``uplink_rates_gbit_s`` with node ``node`` at 1 Gbit/s."""
        rates = [f"{r:g}" for r in self.uplink_rates_gbit_s]
        rates[node] = "1"
        return f"interconnect.uplink_rates_gbit_s=[{','.join(rates)}]"


# Every interconnect option, by name.
INTERCONNECTS: dict[str, type[LinkConfig]] = {
    "auto": AutoArm,
    "nvlink": NvlinkArm,
    "pcie": PcieArm,
    "socket": SocketArm,
    "emulated": EmulatedInterconnect,
}
# Keys every interconnect option had before the emulated link's were its own: a rerun.yaml
# written then carries them (null or 0) for every option.
FORMER_LINK_KEYS = ("rate_gbit_s", "delay_ms", "jitter_ms", "nodes")
