"""Did NCCL use the transport the interconnect arm expects? A verdict from NCCL's own logs.

``verified`` is True when the logs show the expected family and none of the forbidden ones,
False when they contradict the arm (the ``pcie`` arm showing any P2P or NVLS channel, the
``nvlink`` arm showing no P2P channel or a non-NVLink path), and None when it cannot be known:
gloo, a single rank (no data moves between GPUs), ``interconnect=auto``, or no NCCL INFO
lines (the user chose their own NCCL_DEBUG).
"""

from __future__ import annotations

from typing import Any

# INIT, ENV and GRAPH show the transports; TUNING shows the algorithm and protocol of each
# collective call (rank 0 of each communicator prints it).
DEBUG_SUBSYSTEMS = "INIT,ENV,GRAPH,TUNING"


def nccl_debug_env(log_file: str, environ: dict[str, str]) -> dict[str, str]:
    """Variables sending NCCL's INFO log to ``log_file``; none if the user set NCCL_DEBUG."""
    if "NCCL_DEBUG" in environ:
        return {}
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": DEBUG_SUBSYSTEMS,
        "NCCL_DEBUG_FILE": log_file,
    }


def families_used(summary: dict[str, Any]) -> str:
    used = [family for family, count in summary["channels"].items() if count]
    return "+".join(used) if used else "none"


def _verdict(summary: dict[str, Any], expected: str) -> tuple[bool, str]:
    channels, nvls = summary["channels"], summary["nvls_channels"]
    paths = summary["graph_intra_types"]
    if expected == "P2P":
        if channels["P2P"] == 0:
            return False, f"no P2P channel: NCCL used {families_used(summary)}"
        if paths and "NVL" not in paths:
            return False, f"P2P channels, but over {'/'.join(paths)} paths, not NVLink"
        return True, f"{channels['P2P']} P2P channel connections" + (
            f" over NVLink (graph path {'/'.join(paths)})" if paths else ""
        )
    if expected == "SHM":
        if channels["P2P"] or nvls:
            return False, (
                f"{channels['P2P']} P2P and {nvls} NVLS channels: NVLink or peer-to-peer was "
                "still used"
            )
        if channels["SHM"] == 0:
            return False, f"no SHM channel: NCCL used {families_used(summary)}"
        return True, f"{channels['SHM']} SHM channel connections, no P2P or NVLS"
    if channels["P2P"] or channels["SHM"] or nvls:
        return False, f"NCCL used {families_used(summary)} (NVLS channels: {nvls}), not only NET"
    if channels["NET"] == 0:
        return False, "no NET channel"
    return True, f"{channels['NET']} NET channel connections, no P2P, SHM or NVLS"


def verify(
    summary: dict[str, Any] | None, expected: str, backend: str, world_size: int
) -> dict[str, Any]:
    """The result.json ``transport`` object for one job."""
    if backend != "nccl":
        return {
            "transport": backend,
            "expected": expected,
            "verified": None,
            "reason": f"backend={backend}: NCCL transports do not apply",
        }
    result: dict[str, Any] = {"expected": expected, "summary": summary}
    if not summary or summary["nccl_lines"] == 0:
        reason = "no NCCL INFO log lines (NCCL_DEBUG set in the environment?)"
        return {**result, "transport": "unknown", "verified": None, "reason": reason}
    result["transport"] = families_used(summary)
    if world_size < 2:
        reason = "one rank: NCCL moves no data between GPUs"
        return {**result, "verified": None, "reason": reason}
    if expected == "any":
        reason = "interconnect=auto expects no particular transport"
        return {**result, "verified": None, "reason": reason}
    verified, reason = _verdict(summary, expected)
    return {**result, "verified": verified, "reason": reason}


def verify_link(link: dict[str, Any], nccl: dict[str, Any]) -> dict[str, Any]:
    """An emulated arm's check (``link``: what rank 0 recorded of its sockets, the link
    probe's bytes and every node's uplink counters), on top of NCCL's (``nccl``)."""
    sockets, uplinks = link.get("sockets"), link.get("uplinks", [])
    base = {**nccl, "transport": f"emulated link ({nccl['transport']})"}
    if not sockets or not uplinks:
        reason = "the run ended before rank 0 checked its sockets, or the counters were lost"
        return {**base, "verified": None, "reason": reason}
    nodes = len(uplinks)
    if nodes < 2:
        one = "one rank" if sum(len(u.get("ranks") or []) for u in uplinks) == 1 else "one node"
        reason = f"{one}: nothing crosses the link, so it witnesses nothing"
        return {**base, "verified": None, "reason": reason}
    if not sockets["verified"]:
        return {**base, "verified": False, "reason": sockets["reason"]}
    if link.get("above_limit"):  # the rate read is not the link's: it was not shaped
        return {**base, "verified": False, "reason": link["above_limit"]}
    # One probe call's share: however the nodes' ranks reduce among themselves first, the
    # nodes' all-reduce moves at least 2(N-1)/N of its bytes through each node's uplink.
    floor = link.get("probe_bytes", 0) * 2 * (nodes - 1) / nodes
    short = [u["node"] for u in uplinks if u["tx_bytes"] < floor]
    if short:
        return {
            **base,
            "verified": False,
            "reason": f"the uplink of node(s) {short} sent less than the link probe alone "
            f"must ({floor:,.0f} bytes)",
        }
    if nccl["verified"] is False:
        return {**base, "verified": False, "reason": nccl["reason"]}
    buckets = [u[end] for u in uplinks for end in ("shaper_out", "shaper_in") if u.get(end)]
    if buckets and not sum(b["bytes"] for b in buckets):
        reason = "the link's token buckets passed no bytes: the traffic did not cross the shaper"
        return {**base, "verified": False, "reason": reason}
    sent = ", ".join(f"node {u['node']} {u['tx_bytes'] / 1e6:,.1f} MB" for u in uplinks)
    reason = f"{sockets['reason']}; sent over the link: {sent}"
    if buckets:
        held = sum(b["overlimits"] for b in buckets)
        reason += (
            f"; shaped: the token buckets held back {held:,} packets for the rate"
            if held
            else "; the token buckets never held a packet back: at this rate the link did not "
            "limit this run"
        )
    if nccl["verified"]:
        reason += f"; NCCL: {nccl['reason']}"
    return {**base, "verified": True, "reason": reason}


# NVLink bytes per step per GPU a ring all-reduce of the gradients moves, as a share of
# 2(n-1)/n x gradient bytes, inside which the counters confirm the arm (order of magnitude:
# NCCL may pick a tree, split channels, or add protocol bytes).
WITNESS_BAND = (0.25, 4.0)
# Below this share the counters show no NVLink traffic worth the name.
NO_TRAFFIC_SHARE = 0.01


def hardware_witness(
    hw: dict[str, Any] | None, comm_bytes: float | None, expected: str, world_size: int
) -> dict[str, Any]:
    """What the GPUs' NVLink counters say of the arm: ``witnessed`` true, false or None.

    An arm expecting P2P over NVLink must show NVLink bytes per step per GPU of the order of
    the ring all-reduce's 2(n-1)/n x the bytes all-reduced; an arm expecting SHM or NET must
    show about none."""
    per_step = (hw or {}).get("nvlink_tx_bytes_per_step")
    if not hw or not hw.get("available"):
        return {"witnessed": None, "reason": (hw or {}).get("reason", "no hardware counters")}
    if per_step is None:
        return {"witnessed": None, "reason": "this GPU's driver reports no NVLink counters"}
    out: dict[str, Any] = {"nvlink_tx_bytes_per_step": per_step}
    if world_size < 2 or not comm_bytes:
        return {**out, "witnessed": None, "reason": "one rank: no traffic between GPUs"}
    ring = 2 * (world_size - 1) / world_size * comm_bytes
    share = per_step / ring
    out.update(ring_bytes_per_step=ring, share_of_ring=share)
    if expected == "P2P":
        low, high = WITNESS_BAND
        ok = low <= share <= high
        reason = f"NVLink carried {share:.2f}x the ring's bytes per step"
        return {**out, "witnessed": ok, "reason": reason + ("" if ok else ": not the all-reduce")}
    if expected in ("SHM", "NET"):
        ok = share < NO_TRAFFIC_SHARE
        reason = f"NVLink carried {share:.3f}x the ring's bytes per step"
        return {**out, "witnessed": ok, "reason": reason + ("" if ok else ": NVLink was used")}
    return {**out, "witnessed": None, "reason": "interconnect=auto expects no particular link"}
