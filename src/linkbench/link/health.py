"""Is this all-reduce bandwidth what the hardware should give? A one-line health verdict.

A ``task=allreduce`` job's peak all_reduce bus bandwidth is compared with the figure
published for its link type and GPU count (NVLS stays off in linkbench, so the ring figure):

- 8 x H100/H200 SXM over NVSwitch, Ring: about 370 GB/s (480 with NVLS; NVIDIA/nccl-tests
  issue 212); 8 x H200 through torch.distributed with NVLS off measured 368 GB/s at 16 GiB
  (stas00/ml-engineering, network/benchmarks/results/all-reduce-8xH200.md).

"as expected" at 80 % of the reference or more, else "low" with what to check. Where no
published figure matches (another GPU count, another link, the pcie arm), the line says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

HEALTHY_SHARE = 0.8


@dataclass(frozen=True)
class Reference:
    gpus: int
    link: str
    gpu_names: tuple[str, ...]
    busbw_gb_s: float
    source: str


REFERENCES = (
    Reference(8, "NVLink", ("H100", "H200"), 370.0, "NVIDIA/nccl-tests issue 212 (Ring)"),
)


def link_type(topology: dict[str, Any]) -> str | None:
    """NVLink when every pair of GPUs in use is NVLink-connected, PCIe otherwise."""
    pairs = topology.get("pairs") or []
    if not topology.get("available") or not pairs:
        return None
    return "NVLink" if all(p["nvlink"] for p in pairs) else "PCIe"


def health(
    peak_gb_s: float,
    world_size: int,
    interconnect: str,
    expected_transport: str,
    topology: dict[str, Any],
) -> dict[str, Any]:
    """The health verdict of a peak all_reduce busbw on this hardware. The references are
    of peer-to-peer all-reduces, so an arm that expects another transport (``SHM``, ``NET``:
    pcie, socket, an emulated link) has none."""
    link = link_type(topology)
    names = {g.get("name", "") for g in topology.get("gpus", [])}
    if world_size < 2 or link is None:
        return {"verdict": None, "line": "no reference: needs two or more GPUs with NVML topology"}
    if expected_transport not in ("P2P", "any"):
        return {"verdict": None, "line": f"no reference for interconnect={interconnect}"}
    for ref in REFERENCES:
        if (ref.gpus, ref.link) == (world_size, link) and all(
            any(n in name for n in ref.gpu_names) for name in names
        ):
            share = peak_gb_s / ref.busbw_gb_s
            verdict = "as expected" if share >= HEALTHY_SHARE else "low"
            line = (
                f"all_reduce busbw {peak_gb_s:.0f} GB/s is {share:.0%} of the {ref.busbw_gb_s:.0f} "
                f"GB/s published for {world_size} x {'/'.join(ref.gpu_names)} over {link} "
                f"({ref.source}): {verdict}"
            )
            if verdict == "low":
                line += (
                    "; check that no other job uses these GPUs, that NCCL_P2P_DISABLE and "
                    "NCCL_ALGO are unset, and every link is up (nvidia-smi nvlink -s)"
                )
            return {"verdict": verdict, "reference_gb_s": ref.busbw_gb_s, "share": share,
                    "source": ref.source, "line": line}  # fmt: skip
    return {"verdict": None,
            "line": f"no published reference for {world_size} GPUs over {link} here"}  # fmt: skip
