"""Did NCCL use the transport the interconnect arm expects? A verdict from NCCL's own logs.

``verified`` is True when the logs show the expected family and none of the forbidden ones,
False when they contradict the arm (the ``pcie`` arm showing any P2P or NVLS channel, the
``nvlink`` arm showing no P2P channel or a non-NVLink path), and None when it cannot be known:
gloo, a single rank (no data moves between GPUs), ``interconnect=auto``, or no NCCL INFO
lines (the user chose their own NCCL_DEBUG).
"""

from __future__ import annotations

from typing import Any

DEBUG_SUBSYSTEMS = "INIT,ENV,GRAPH"


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
