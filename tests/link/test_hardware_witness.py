"""The NVLink counters as a second witness of the transport, on known byte counts."""

from __future__ import annotations

import pytest

from linkbench.link.transport import hardware_witness

GRAD = 100e6  # bytes all-reduced per step
RING_8 = 2 * 7 / 8 * GRAD


def hw(nvlink_per_step: float | None) -> dict:
    record = {"available": True}
    if nvlink_per_step is not None:
        record["nvlink_tx_bytes_per_step"] = nvlink_per_step
    return record


@pytest.mark.parametrize(
    ("expected", "nvlink", "witnessed"),
    [
        ("P2P", RING_8, True),  # the ring's bytes crossed NVLink
        ("P2P", 1.3 * RING_8, True),  # protocol bytes, channel splits: the same order
        ("P2P", 0.0, False),  # the nvlink arm that moved nothing over NVLink
        ("SHM", 0.0, True),  # the pcie arm: nothing over NVLink
        ("SHM", 0.5 * RING_8, False),  # the pcie arm that still used NVLink
        ("NET", 1e3, True),
    ],
)
def test_nvlink_bytes_confirm_or_contradict_the_arm(expected, nvlink, witnessed):
    verdict = hardware_witness(hw(nvlink), GRAD, expected, world_size=8)
    assert verdict["witnessed"] is witnessed, verdict["reason"]
    assert verdict["ring_bytes_per_step"] == pytest.approx(RING_8)


def test_no_verdict_without_counters_or_with_one_rank():
    assert hardware_witness(None, GRAD, "P2P", 8)["witnessed"] is None
    unavailable = {"available": False, "reason": "no GPU: NVML counters need a CUDA device"}
    assert hardware_witness(unavailable, GRAD, "P2P", 8)["reason"].startswith("no GPU")
    assert "no NVLink counters" in hardware_witness(hw(None), GRAD, "P2P", 8)["reason"]
    one = hardware_witness(hw(0.0), GRAD, "P2P", 1)
    assert one["witnessed"] is None and one["nvlink_tx_bytes_per_step"] == 0.0


def topology(name: str, gpus: int, nvlink: bool) -> dict:
    return {
        "available": True,
        "gpus": [{"name": f"NVIDIA {name}"} for _ in range(gpus)],
        "pairs": [
            {"ranks": [i, j], "nvlink": nvlink} for i in range(gpus) for j in range(i + 1, gpus)
        ],
    }


def test_allreduce_health_against_the_published_figure():
    from linkbench.link.health import health

    good = health(360.0, 8, "nvlink", "P2P", topology("H200", 8, True))
    assert good["verdict"] == "as expected" and "nccl-tests issue 212" in good["line"]
    low = health(150.0, 8, "auto", "any", topology("H100 80GB HBM3", 8, True))
    assert low["verdict"] == "low" and "nvidia-smi nvlink -s" in low["line"]
    assert health(20.0, 2, "nvlink", "P2P", topology("L40S", 2, False))["verdict"] is None
    assert health(0.0, 1, "auto", "any", topology("H200", 1, True))["verdict"] is None
    # Arms of another transport have no peer-to-peer reference, whatever their name.
    for arm, transport in (("pcie", "SHM"), ("socket", "NET"), ("emulated", "NET")):
        judged = health(30.0, 8, arm, transport, topology("H200", 8, True))
        assert judged == {"verdict": None, "line": f"no reference for interconnect={arm}"}
