"""What the hardware is: the GPUs a job uses, how they are linked, and the software versions.

GPU facts come from NVML (nvidia-ml-py): name, memory, PCI bus id, whether each pair of GPUs
in use can talk over NVLink (``nvmlDeviceGetP2PStatus`` with the NVLink capability, which
also holds through NVSwitches), the PCIe path between them and the active NVLink count per
GPU. ``nvidia-smi topo -m`` is recorded as text where the command exists. GPUs are matched to
CUDA devices by UUID, so ``CUDA_VISIBLE_DEVICES`` reordering cannot mislead.
"""

from __future__ import annotations

import platform
import re
import shutil
import socket
import subprocess
import sys
from typing import Any

ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")  # nvidia-smi underlines its header
# nvmlDeviceGetTopologyCommonAncestor levels (nvml.h), in nvidia-smi topo's words.
PCIE_PATHS = {
    0: "same board",
    10: "PIX (one PCIe switch)",
    20: "PXB (several PCIe switches)",
    30: "PHB (PCIe host bridge)",
    40: "NODE (across host bridges in a NUMA node)",
    50: "SYS (across NUMA nodes)",
}


def versions() -> dict[str, Any]:
    """Python, torch, CUDA, NCCL and Hydra versions, and the host."""
    import hydra
    import torch

    nccl = None
    if torch.cuda.is_available():
        try:
            nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
        except (AttributeError, RuntimeError):
            nccl = None
    return {
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "hydra": hydra.__version__,
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "executable": sys.executable,
    }


def nvidia_smi_topology() -> str | None:
    """``nvidia-smi topo -m`` output, or None where the command is missing or fails."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ANSI_ESCAPE.sub("", done.stdout) if done.returncode == 0 else None


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_topology(uuids: list[str]) -> dict[str, Any]:
    """NVML facts about the GPUs with these UUIDs (in rank order) and every pair of them."""
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as error:  # no driver, no library: say why, don't fail the job
        return {"available": False, "reason": f"NVML unavailable: {error}"}
    try:
        handles = [nv.nvmlDeviceGetHandleByUUID(u) for u in uuids]
        gpus = []
        for rank, handle in enumerate(handles):
            links = 0
            for link in range(nv.NVML_NVLINK_MAX_LINKS):
                try:
                    links += nv.nvmlDeviceGetNvLinkState(handle, link) == nv.NVML_FEATURE_ENABLED
                except nv.NVMLError:
                    break
            gpus.append(
                {
                    "local_rank": rank,
                    "name": _decode(nv.nvmlDeviceGetName(handle)),
                    "memory_total_bytes": int(nv.nvmlDeviceGetMemoryInfo(handle).total),
                    "bus_id": _decode(nv.nvmlDeviceGetPciInfo(handle).busId),
                    "uuid": uuids[rank],
                    "nvlinks_active": links,
                }
            )
        pairs = []
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                status = nv.nvmlDeviceGetP2PStatus(
                    handles[i], handles[j], nv.NVML_P2P_CAPS_INDEX_NVLINK
                )
                level = nv.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])
                pairs.append(
                    {
                        "ranks": [i, j],
                        "nvlink": status == nv.NVML_P2P_STATUS_OK,
                        "pcie_path": PCIE_PATHS.get(level, str(level)),
                    }
                )
        cuda_driver = nv.nvmlSystemGetCudaDriverVersion_v2()
        return {
            "available": True,
            "driver": _decode(nv.nvmlSystemGetDriverVersion()),
            "cuda_driver": f"{cuda_driver // 1000}.{cuda_driver % 1000 // 10}",
            "gpus": gpus,
            "pairs": pairs,
        }
    except Exception as error:
        return {"available": False, "reason": f"NVML query failed: {error}"}
    finally:
        nv.nvmlShutdown()


def link_warnings(topology: dict[str, Any], interconnect: str) -> list[str]:
    """Loud warnings when the hardware cannot be what the interconnect arm claims."""
    if not topology.get("available"):
        return []
    warnings = []
    names = {gpu["name"] for gpu in topology["gpus"]}
    if len(names) > 1:
        warnings.append(
            f"the GPUs in use are of different models ({', '.join(sorted(names))}); "
            "NCCL may fall back to slower paths and the slowest GPU sets the pace."
        )
    if interconnect == "nvlink":
        missing = [p for p in topology["pairs"] if not p["nvlink"]]
        if missing:
            shown = ", ".join(
                f"{a}-{b} ({p['pcie_path']})" for p in missing for a, b in [p["ranks"]]
            )
            warnings.append(
                f"interconnect=nvlink, but these GPU pairs (local ranks) are not NVLink-connected: "
                f"{shown}; their traffic cannot use NVLink."
            )
    return warnings
