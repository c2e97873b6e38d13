"""The NCCL log parser on lines of several NCCL versions, its command, and the transport verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from linkbench.link.nccl_log import parse_files, parse_lines, transport_family
from linkbench.link.transport import nccl_debug_env, verify

LOGS = Path(__file__).parent / "data" / "nccl"


def summary_of(name: str) -> dict:
    return parse_files([LOGS / name])


@pytest.mark.parametrize(
    ("via", "family"),
    [
        ("P2P/CUMEM/read", "P2P"),
        ("P2P/IPC", "P2P"),
        ("P2P/direct pointer", "P2P"),
        ("P2P/indirect/1[1]", "P2P"),
        ("SHM/direct/direct", "SHM"),
        ("SHM/direct", "SHM"),
        ("SHM/CE", "SHM"),
        ("direct shared memory", "SHM"),
        ("NET/Socket/0", "NET"),
        ("NET/IB/0/GDRDMA", "NET"),
        ("NET/IBext_v8/1/GDRDMA", "NET"),
        ("something else", None),
    ],
)
def test_transport_families(via, family):
    assert transport_family(via) == family


def test_nccl_2_5_direct_shared_memory():
    s = summary_of("nccl-2.5-shm.log")
    assert s["version"] == "2.5.6+cuda10.1"
    assert s["channels"] == {"P2P": 0, "SHM": 4, "NET": 0}
    assert s["nranks"] == 2


def test_nccl_2_10_bus_id_brackets_and_pcie_path():
    s = summary_of("nccl-2.10-p2p-pcie.log")
    assert s["version"] == "2.10.3+cuda11.4"
    assert s["channels"] == {"P2P": 4, "SHM": 0, "NET": 0}
    assert s["graph_intra_types"] == ["PIX"]


def test_nccl_2_21_nvlink_with_nvls():
    s = summary_of("nccl-2.21-nvlink-nvls.log")
    assert s["version"] == "2.21.5+cuda12.4"
    assert s["channels"] == {"P2P": 6, "SHM": 0, "NET": 0}
    assert s["transports"] == {"P2P/CUMEM": 2, "P2P/CUMEM/read": 4}
    assert s["nvls_channels"] == 16
    assert s["graph_intra_types"] == ["NVL"]
    assert s["env"] == {"NCCL_P2P_DISABLE": "0"}
    assert s["nranks"] == 4


def test_nccl_2_21_p2p_disabled_stages_through_shm():
    s = summary_of("nccl-2.21-pcie-shm.log")
    assert s["channels"] == {"P2P": 0, "SHM": 4, "NET": 0}
    assert s["nvls_channels"] == 0
    assert s["env"] == {"NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1"}


def test_nccl_2_27_sockets_and_trailing_dot_in_env_echo():
    s = summary_of("nccl-2.27-socket.log")
    assert s["channels"] == {"P2P": 0, "SHM": 0, "NET": 6}
    assert s["env"]["NCCL_SHM_DISABLE"] == "1"


def test_nccl_2_28_mixed_transports_and_plugins():
    s = summary_of("nccl-2.28-multinode-ib.log")
    assert s["version"] == "2.28.9+cuda13.0"
    assert s["channels"] == {"P2P": 2, "SHM": 1, "NET": 3}
    assert s["transports"]["P2P/direct pointer"] == 1
    assert s["transports"]["NET/IBext_v8/1/GDRDMA"] == 1
    assert s["nranks"] == 16


def test_real_one_rank_log_from_the_h200():
    s = summary_of("nccl-2.28-h200-1rank.log")
    assert s["version"] == "2.28.9+cuda13.0"
    assert s["nranks"] == 1
    assert s["channels"] == {"P2P": 0, "SHM": 0, "NET": 0}  # one rank connects to no peer
    assert s["graph_intra_types"] == ["LOC"]
    assert verify(s, "P2P", "nccl", world_size=1)["verified"] is None


def test_lines_without_nccl_count_nothing():
    s = parse_lines(["hello via P2P/IPC", "Channel 00 via SHM/direct but no marker"])
    assert s["nccl_lines"] == 0 and s["channels"] == {"P2P": 0, "SHM": 0, "NET": 0}


def test_command_prints_json_summary_of_several_files():
    files = [LOGS / "nccl-2.21-pcie-shm.log", LOGS / "nccl-2.27-socket.log"]
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.nccl_log", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["channels"] == {"P2P": 0, "SHM": 4, "NET": 6}
    assert out["version"] == "2.27.3+cuda12.9"
    assert out["nvls_channels"] == 0


def test_command_refuses_a_missing_file(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "linkbench.nccl_log", str(tmp_path / "nope.log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no such file" in done.stderr


@pytest.mark.parametrize(
    ("log", "expected", "verified"),
    [
        ("nccl-2.21-nvlink-nvls.log", "P2P", True),
        ("nccl-2.10-p2p-pcie.log", "P2P", False),  # P2P, but over PCIe (PIX), not NVLink
        ("nccl-2.21-pcie-shm.log", "P2P", False),
        ("nccl-2.21-pcie-shm.log", "SHM", True),
        ("nccl-2.21-nvlink-nvls.log", "SHM", False),  # the pcie arm must show no P2P or NVLS
        ("nccl-2.27-socket.log", "NET", True),
        ("nccl-2.21-pcie-shm.log", "NET", False),
        ("nccl-2.21-nvlink-nvls.log", "any", None),
    ],
)
def test_verdicts(log, expected, verified):
    transport = verify(summary_of(log), expected, "nccl", world_size=2)
    assert transport["verified"] is verified
    assert transport["reason"]


def test_pcie_arm_with_nvls_channels_only_is_refuted():
    summary = parse_lines(
        ["h:1:1 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
         "h:1:1 [0] NCCL INFO 16 coll channels, 0 collnet channels, 16 nvls channels, "
         "16 p2p channels, 1 p2p channels per peer"]
    )  # fmt: skip
    assert verify(summary, "SHM", "nccl", 2)["verified"] is False


def test_unknowable_cases_are_null():
    nvlink = summary_of("nccl-2.21-nvlink-nvls.log")
    assert verify(None, "P2P", "gloo", 2) | {"reason": ""} == {
        "transport": "gloo",
        "expected": "P2P",
        "verified": None,
        "reason": "",
    }
    assert verify(nvlink, "P2P", "nccl", 1)["verified"] is None
    assert verify(parse_lines([]), "P2P", "nccl", 2)["verified"] is None


def test_user_nccl_debug_wins():
    assert nccl_debug_env("/x/nccl.rank0.log", {"NCCL_DEBUG": "WARN"}) == {}
    env = nccl_debug_env("/x/nccl.rank0.log", {})
    assert env["NCCL_DEBUG"] == "INFO"
    assert set(env["NCCL_DEBUG_SUBSYS"].split(",")) >= {"INIT", "ENV", "GRAPH"}
    assert env["NCCL_DEBUG_FILE"] == "/x/nccl.rank0.log"
