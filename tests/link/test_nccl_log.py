"""The NCCL log parser on lines of several NCCL versions, its command, and the transport verdict."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from linkbench.link.nccl_log import (
    parse_files,
    parse_lines,
    requested_vs_used,
    transport_family,
)
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
        ("NET/AWS Libfabric/3/GDRDMA", "NET"),
        ("COLLNET/SHARP/5/GDRDMA", "NET"),
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


# --- Published logs as users paste them (sources in data/nccl/README.md) ---------------------


def test_nccl_2_4_ring_lines_pytorch_23534():
    s = summary_of("nccl-2.4-ring-pytorch-23534.log")
    assert s["version"] == "2.4.2+cuda10.0"
    assert s["channels"] == {"P2P": 4, "SHM": 3, "NET": 2}
    # the trailing space after each label is not part of it
    assert s["transports"] == {"NET/Socket/0": 2, "P2P/IPC": 4, "direct shared memory": 3}


def test_interleaved_ranks_nccl_147():
    s = summary_of("interleaved-nccl-147.log")
    # 8 lines with a header (two of them carrying a second rank's header) and the 2 bodies
    # whose headers went onto those lines
    assert s["channels"] == {"P2P": 10, "SHM": 0, "NET": 0}
    assert s["transports"] == {"P2P/IPC": 10}


def test_mpirun_tag_output_nccl_300():
    s = summary_of("nccl-2.5-mpirun-tag-output-nccl-300.log")
    assert s["version"] == "2.5.6+cuda10.2"
    assert s["nccl_lines"] == 9
    assert s["channels"] == {"P2P": 0, "SHM": 0, "NET": 0}


def test_mpirun_tag_output_on_via_lines_and_label_with_a_space():
    s = summary_of("nccl-2.8-mpirun-efa-aws-efa-eks.log")
    assert s["version"] == "2.8.3+cuda11.2"
    assert s["channels"] == {"P2P": 3, "SHM": 0, "NET": 3}
    assert s["transports"] == {
        "NET/AWS Libfabric/0/GDRDMA": 1,
        "NET/AWS Libfabric/3/GDRDMA": 2,
        "P2P/IPC/read": 3,
    }


def test_ray_repeated_suffix_vllm_15769():
    s = summary_of("ray-repeated-vllm-15769.log")
    assert s["env"] == {"NCCL_CUMEM_ENABLE": "0", "NCCL_P2P_LEVEL": "NVL"}
    assert s["nranks"] == 8
    # "Channel 00/0 : 6[ [repeated 27x across cluster]" was cut before its transport
    assert s["channels"] == {"P2P": 0, "SHM": 0, "NET": 0}
    assert s["nccl_lines"] == 8


def test_ray_train_prefix_with_ip_and_coll_lines_nccl_1193():
    s = summary_of("ray-train-coll-nccl-1193.log")
    assert s["nccl_lines"] == 2
    assert s["nranks"] == 128  # "[nranks=128]"
    assert s["tuning"]["calls"] == 0  # per-call COLL lines name no algorithm


def test_ansi_colour_codes_pasted_as_text_vllm_5405():
    s = summary_of("ray-ansi-vllm-5405.log")
    assert s["channels"] == {"P2P": 0, "SHM": 1, "NET": 0}
    assert s["transports"] == {"SHM/direct/direct": 1}
    assert s["env"] == {"NCCL_LAUNCH_MODE": "GROUP"}
    assert s["nranks"] == 4
    assert s["nccl_lines"] == 6  # lines cut before "NCCL" and the wrapped dedup note are not


def test_ansi_escape_bytes_read_like_their_text_rendering():
    text = (LOGS / "ray-ansi-vllm-5405.log").read_text()
    with_bytes = parse_lines(text.replace("ESC[", "\x1b[").splitlines(keepends=True))
    assert with_bytes == parse_lines(text.splitlines(keepends=True))
    lost_escape = parse_lines(text.replace("ESC[", "[").splitlines(keepends=True))
    assert lost_escape == with_bytes


def test_two_records_glued_on_one_line_vllm_2442():
    s = summary_of("ray-glued-vllm-2442.log")
    assert s["channels"] == {"P2P": 5, "SHM": 0, "NET": 0}
    assert s["transports"] == {"P2P/IPC": 5}  # no label swallowed the next record


def test_rccl_comm_suffix_and_integer_env_values_ray_59778():
    s = summary_of("ray-rccl-suffix-ray-59778.log")
    assert s["transports"] == {"P2P/IPC": 1}
    assert s["env"] == {"NCCL_MIN_P2P_NCHANNELS": "16", "NCCL_NCHANNELS_PER_PEER": "16"}
    assert s["nranks"] == 32


@pytest.mark.parametrize(
    ("log", "transports"),
    [
        ("collnet-sharp-nccl-1219.log", {"COLLNET/SHARP/5/GDRDMA": 1}),
        (
            "collnet-sharp-coreweave-39.log",
            {"COLLNET/SHARP/5/GDRDMA": 1, "COLLNET/SHARP/6/GDRDMA": 1},
        ),
        (
            "nccl-2.23-collnet-sharp-nccl-tests-311.log",
            {"COLLNET/SHARP/0/GDRDMA": 1, "COLLNET/SHARP/1/GDRDMA": 2, "COLLNET/SHARP/5/GDRDMA": 1},
        ),
    ],
)
def test_collnet_lines_count_as_net(log, transports):
    s = summary_of(log)
    assert s["transports"] == transports
    assert s["channels"] == {"P2P": 0, "SHM": 0, "NET": sum(transports.values())}


def test_collnet_send_line_and_its_2_12_form():
    # "CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s" (src/transport/coll_net.cc, 2.19) and
    # "CollNet %02d : %d [send] via COLLNET/%s/%d%s" (2.12)
    s = parse_lines(
        ["hostname:174:4057 [3] NCCL INFO CollNet 01/1 : 3 [send] via COLLNET/SHARP/4/GDRDMA",
         "hostname:174:4057 [3] NCCL INFO CollNet 02 : 3 [send] via COLLNET/SHARP/4"]
    )  # fmt: skip
    assert s["transports"] == {"COLLNET/SHARP/4": 1, "COLLNET/SHARP/4/GDRDMA": 1}
    assert s["channels"]["NET"] == 2


def test_decorations_without_a_published_excerpt():
    s = parse_lines(
        [
            # NCCL 2.26+ timestamp prefix (NCCL_DEBUG_TIMESTAMP_FORMAT), on a published WARN
            # line (NVIDIA/nccl-tests#352) and on an INFO one
            "[2025-10-23 10:26:31] lrdn2146:1399931:1399978 [3] graph/search.cc:1127 NCCL WARN "
            "Could not find a path for pattern 1, falling back to simple order",
            "[2025-10-23 10:26:31] lrdn2146:1399931:1399978 [3] NCCL INFO Channel 00/0 : "
            "3[3] -> 0[0] via P2P/CUMEM/read",
            # Ray's old "(pid=N)" prefix and nested prefixes, real escape bytes around them
            "\x1b[36m(pid=2918546)\x1b[0m molgpu01:2918546:2958981 [0] NCCL INFO Channel 00 : "
            "1[21000] -> 0[1000] via P2P/IPC\x1b[32m [repeated 3x across cluster]\x1b[0m",
            "(EngineCore_DP0 pid=1088) (RayWorkerWrapper pid=285, ip=192.168.177.12) "
            "spark2:285:285 [0] NCCL INFO NCCL_ALGO set by environment to Ring "
            "[repeated 2x across cluster]",
            # two env echoes glued by an aggregator
            "h:1:1 [0] NCCL INFO NCCL_PROTO set by environment to LL128 "
            "h:1:1 [0] NCCL INFO NCCL_BUFFSIZE set by environment to 4194304.",
        ]
    )
    assert s["transports"] == {"P2P/CUMEM/read": 1, "P2P/IPC": 1}
    assert s["env"] == {"NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "4194304", "NCCL_PROTO": "LL128"}
    assert s["nccl_lines"] == 6


def test_env_values_keep_a_period_that_is_not_nccls():
    s = parse_lines(
        ["h:1:1 [0] NCCL INFO NCCL_COLLNET_ENABLE set by environment to 1.",
         "h:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth."]
    )  # fmt: skip
    assert s["env"] == {"NCCL_COLLNET_ENABLE": "1", "NCCL_SOCKET_IFNAME": "eth."}


def test_trace_connection_lines_are_not_counted_twice():
    s = parse_lines(
        ["h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
         "h:1:2 [0] 12.5 p2pRecvSetup:428 NCCL TRACE Ring 00 : 1[1] <- 0[0] via P2P/CUMEM"]
    )  # fmt: skip
    assert s["channels"]["P2P"] == 1


def test_newest_version_wins_numerically():
    s = parse_files([LOGS / "nccl-2.5-shm.log", LOGS / "nccl-2.10-p2p-pcie.log"])
    assert s["version"] == "2.10.3+cuda11.4"


# --- TUNING: algorithm and protocol per call ---------------------------------------------------


def test_tuning_numeric_lines_of_2_20_to_2_22_nccl_1595():
    t = summary_of("tuning-numeric-nccl-1595.log")["tuning"]
    # the tuning table rows above the per-call lines are not calls
    assert t == {
        "calls": 6,
        "algorithms": {"Ring": 6},
        "protocols": {"Simple": 6},
        "by_collective": {},
    }


def test_tuning_numeric_lines_with_prefix_and_glued_row_nccl_1453():
    t = summary_of("tuning-numeric-glued-nccl-1453.log")["tuning"]
    assert t["calls"] == 9
    assert t["algorithms"] == {"Tree": 9}
    assert t["protocols"] == {"LL": 5, "LL128": 4}


def test_tuning_from_trace_build_nccl_1304():
    s = summary_of("nccl-2.21-tuning-trace-nccl-1304.log")
    assert s["tuning"]["algorithms"] == {"Ring": 1}
    assert s["tuning"]["protocols"] == {"LL": 1}
    assert s["nranks"] == 1024


def test_trace_copies_are_ignored_when_info_lines_exist():
    s = parse_lines(
        ["h:1:1 [0] NCCL INFO AllReduce: 4 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",
         "h:1:1 [0] 3.2 topoGetAlgoInfo:1660 NCCL TRACE 4 Bytes -> Algo 1 proto 2 time 8.000000"]
    )  # fmt: skip
    assert s["tuning"]["calls"] == 1


def test_tuning_2_23_names_the_collective():
    s = summary_of("nccl-2.23-tuning-constructed.log")
    assert s["env"] == {"NCCL_ALGO": "Tree", "NCCL_BUFFSIZE": "4194304"}
    assert s["tuning"] == {
        "calls": 4,
        "algorithms": {"Tree": 3, "Ring": 1},
        "protocols": {"LL": 2, "Simple": 2},
        "by_collective": {
            "AllReduce": {"algorithms": {"Tree": 3}, "protocols": {"LL": 1, "Simple": 2}},
            "Broadcast": {"algorithms": {"Ring": 1}, "protocols": {"LL": 1}},
        },
    }


def test_tuning_2_24_plus_names_and_symmetric_kernels():
    t = summary_of("nccl-2.30-tuning-constructed.log")["tuning"]
    assert t["calls"] == 5  # the [Symmetric] line names a kernel, not an algorithm
    assert t["algorithms"] == {"Ring": 2, "NVLS": 2, "PAT": 1}
    assert t["protocols"] == {"LL": 1, "LL128": 1, "Simple": 3}
    assert t["by_collective"]["AllReduce"] == {
        "algorithms": {"Ring": 1, "NVLS": 2},
        "protocols": {"LL": 1, "Simple": 2},
    }


@pytest.mark.parametrize(
    ("algo", "proto", "names"),
    [
        ("0", "0", ("Tree", "LL")),
        ("2", "1", ("CollNetDirect", "LL128")),
        ("3", "2", ("CollNetChain", "Simple")),
        ("4", "2", ("NVLS", "Simple")),
        ("5", "2", ("NVLSTree", "Simple")),
        ("6", "2", ("PAT", "Simple")),
        ("-1", "-1", ("Unknown", "Unknown")),
        ("COLLNET_DIRECT", "LL128", ("CollNetDirect", "LL128")),
        ("COLLNET_CHAIN", "SIMPLE", ("CollNetChain", "Simple")),
        ("NVLS_TREE", "SIMPLE", ("NVLSTree", "Simple")),
        ("Unknown", "Unknown", ("Unknown", "Unknown")),
    ],
)
def test_algorithm_and_protocol_names(algo, proto, names):
    line = f"h:1:1 [0] NCCL INFO AllGather: 64 Bytes -> Algo {algo} proto {proto} time 1.0"
    t = parse_lines([line])["tuning"]
    assert (list(t["algorithms"]), list(t["protocols"])) == ([names[0]], [names[1]])


def test_no_tuning_lines_give_empty_counts():
    assert summary_of("nccl-2.21-nvlink-nvls.log")["tuning"] == {
        "calls": 0,
        "algorithms": {},
        "protocols": {},
        "by_collective": {},
    }


# --- requested_vs_used -----------------------------------------------------------------------


def test_request_not_honoured_in_numeric_log():
    s = summary_of("tuning-numeric-nccl-1595.log")
    assert requested_vs_used(s, {"NCCL_PROTO": "Simple"}) == []  # what that job asked for
    assert requested_vs_used(s, {"NCCL_ALGO": "Tree"}) == [
        "NCCL_ALGO=Tree was requested but NCCL ran Ring for 6 of 6 calls"
    ]


def test_broadcast_fell_back_to_ring_ll_nccl_1304():
    s = summary_of("nccl-2.21-tuning-trace-nccl-1304.log")
    assert requested_vs_used(s, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}) == [
        "NCCL_ALGO=Tree was requested but NCCL ran Ring for 1 of 1 call",
        "NCCL_PROTO=Simple was requested but NCCL ran LL for 1 of 1 call",
    ]


def test_request_judged_per_collective_when_lines_name_it():
    s = summary_of("nccl-2.23-tuning-constructed.log")
    assert requested_vs_used(s, s["env"]) == [
        "NCCL_ALGO=Tree was requested but NCCL ran Ring for 1 of 1 Broadcast call"
    ]
    assert requested_vs_used(s, {"NCCL_ALGO": "allreduce:tree"}) == []
    assert requested_vs_used(s, {"NCCL_ALGO": "ring"}) == [
        "NCCL_ALGO=ring was requested but NCCL ran Tree for 3 of 3 AllReduce calls"
    ]


def test_per_collective_request_syntax_of_2_24():
    s = summary_of("nccl-2.30-tuning-constructed.log")
    assert requested_vs_used(s, s["env"]) == [
        "NCCL_ALGO=allreduce:nvls,ring;allgather:ring was requested but NCCL ran PAT for 1 of 1 "
        "AllGather call",
        "NCCL_PROTO=^LL was requested but NCCL ran LL for 1 of 3 AllReduce calls",
    ]
    # a later entry overrides the first for its collective; ReduceScatter keeps the first
    assert requested_vs_used(s, {"NCCL_ALGO": "ring;allreduce:nvls,ring;allgather:pat"}) == []
    assert requested_vs_used(s, {"NCCL_PROTO": "simple;reducescatter:LL128;allreduce:^ll128"}) == []
    assert requested_vs_used(s, {"NCCL_PROTO": "simple"}) == [
        "NCCL_PROTO=simple was requested but NCCL ran LL for 1 of 3 AllReduce calls; "
        "LL128 for 1 of 1 ReduceScatter call"
    ]
    assert requested_vs_used(s, {"NCCL_ALGO": "NVLS"}) == [
        "NCCL_ALGO=NVLS was requested but NCCL ran PAT for 1 of 1 AllGather call; "
        "Ring for 1 of 3 AllReduce calls; Ring for 1 of 1 ReduceScatter call"
    ]


RAN_RING = " was requested but NCCL ran Ring for 6 of 6 calls"


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        ({"NCCL_ALGO": "RING"}, []),
        ({"NCCL_ALGO": "tree,ring"}, []),
        ({"NCCL_ALGO": "^tree"}, []),
        ({"NCCL_ALGO": "^Ring"}, ["NCCL_ALGO=^Ring" + RAN_RING]),
        ({"NCCL_ALGO": "CollNet"}, ["NCCL_ALGO=CollNet" + RAN_RING]),
        ({"NCCL_PROTO": "ll,ll128"},
         ["NCCL_PROTO=ll,ll128 was requested but NCCL ran Simple for 6 of 6 calls"]),
        ({"NCCL_ALGO": "nonsense"}, []),  # nothing NCCL knows: nothing to judge by
        ({"NCCL_ALGO": "allreduce:tree"}, []),  # these lines name no collective
        ({"NCCL_P2P_DISABLE": "1", "NCCL_ALGO": ""}, []),
    ],
)  # fmt: skip
def test_request_spellings(requested, expected):
    assert requested_vs_used(summary_of("tuning-numeric-nccl-1595.log"), requested) == expected


def test_nothing_to_say_without_tuning_lines():
    s = summary_of("nccl-2.21-nvlink-nvls.log")
    assert requested_vs_used(s, {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL128"}) == []
    assert requested_vs_used({}, {"NCCL_ALGO": "Tree"}) == []


def test_a_log_of_messages_without_their_headers_nccl_2_24():
    """NCCL 2.24.3 with NVLS shown as messages only, no "host:pid:tid [dev] NCCL INFO" header
    (the shape of NVIDIA/nccl#1584): before, no rank count, no NVLS channels, no graph and no
    TUNING line were found."""
    s = summary_of("nccl-2.24-headerless-constructed.log")
    assert s["version"] == "2.24.3+cuda12.2"
    assert s["nranks"] == 8
    assert s["nvls_channels"] == 16
    assert s["graph_intra_types"] == ["NVL"]
    assert s["transports"] == {"P2P/CUMEM/read": 2}
    assert s["tuning"]["by_collective"] == {
        "AllReduce": {"algorithms": {"NVLS": 1}, "protocols": {"Simple": 1}}
    }
    assert s["lacks"] == []


def test_what_a_log_lacks_is_said_not_guessed(tmp_path, capsys):
    from linkbench.link.nccl_log import main

    only_via = ["host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"]
    s = parse_lines(only_via)
    assert s["nranks"] is None and s["version"] is None
    assert [why.split(" (")[0] for why in s["lacks"]] == [
        "no NCCL version line", "no rank count", "no per-call TUNING line"
    ]  # fmt: skip
    assert parse_lines(["step 10/100 loss 2.1 on 2 ranks"])["lacks"] == [
        "no NCCL record (was it written with NCCL_DEBUG=INFO?)"
    ]
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(only_via) + "\n")
    assert main([str(log)]) == 0
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith(f"{log}: no NCCL version line")
