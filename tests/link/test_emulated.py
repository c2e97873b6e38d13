"""The emulated link: its names and arithmetic, the refusals, and its namespaces, which are
made for a run and gone after it however it ends (kill -9 included: the next start removes
what a killed one left, and stops what still ran in it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from linkbench.config.plan import Machine, make_plan
from linkbench.errors import ConfigError
from linkbench.link import netns
from linkbench.link.emulated import (
    LinkSpec,
    address,
    check_connections,
    own_connections,
    payload_gb_s,
)

from ..conftest import REPO, alive, clean_env, hparams_of_run, load_result, run_cli

CPU = Machine(cuda_devices=0)
PROBLEM = netns.emulation_problem(delay=False)
needs_namespaces = pytest.mark.skipif(PROBLEM is not None, reason=str(PROBLEM))
# A short task=allreduce job on a 1 Gbit/s emulated link.
ALLREDUCE = [
    "interconnect=emulated",
    "task=allreduce",
    "task.ops=[all_reduce]",
    "task.min_bytes=1048576",
    "task.max_bytes=8388608",
    "task.warmup_iters=1",
    "task.iters=2",
]


def ours() -> list[str]:
    """linkbench's namespaces on this host."""
    return [name for names in netns._ours().values() for name in names]


def _in_namespaces(names: list[str]) -> list[int]:
    """The processes running in the namespaces that still exist."""
    present = set(ours())
    return [
        int(p) for n in names if n in present for p in netns.run("ip", "netns", "pids", n).split()
    ]


def test_names_carry_the_run_and_fit_the_kernels_limits():
    spec = LinkSpec("0123abcd", 1.0, 0.0, 0.0, ranks=128)
    assert len(spec.ifname) <= 15 and "0123abcd" in spec.ifname
    assert all("0123abcd" in name for name in spec.namespaces)
    assert len(set(spec.namespaces)) == 129
    assert len({address(rank) for rank in range(1000)}) == 1000


def test_the_payload_rate_is_the_link_rate_less_every_segments_headers():
    # 1448 bytes of data in each 1514-byte frame at MTU 1500 (TCP timestamps on)
    assert payload_gb_s(1.0) == pytest.approx(0.125 * 1448 / 1514)
    assert payload_gb_s(8.0) == pytest.approx(8 * payload_gb_s(1.0))


@pytest.mark.parametrize(
    ("connections", "verified", "words"),
    [
        ([("10.77.0.1", "10.77.0.2"), ("10.77.0.1", "10.77.0.3")], True, "ran over"),
        ([("10.77.0.1", "10.77.0.2"), ("10.77.0.1", "10.77.0.1")], True, "ran over"),
        ([("10.77.0.1", "10.77.0.2"), ("127.0.0.1", "127.0.0.1")], False, "off the link"),
        ([("10.77.0.1", "192.168.1.5")], False, "off the link"),
        ([], False, "no connection to a peer"),
    ],
)
def test_the_socket_check_passes_only_connections_between_emulated_addresses(
    connections, verified, words
):
    check = check_connections(connections, LinkSpec("0123abcd", 1.0, 0.0, 0.0, 3), rank=0)
    assert check["verified"] is verified and words in check["reason"]


def test_a_connection_its_peer_has_already_closed_still_counts():
    """Rank 0 checks its sockets after the task, when a faster rank may have closed its end:
    such a connection (CLOSE_WAIT) ran over the link all the same."""
    import socket

    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        with accepted:
            assert ("127.0.0.1", "127.0.0.1") in own_connections()
            client.close()  # the peer leaves first
            time.sleep(0.2)
            assert ("127.0.0.1", "127.0.0.1") in own_connections()


def test_without_root_one_sentence_says_how_to_run_it(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netns, "_has_capabilities", lambda *bits: False)
    problem = netns.rights_problem()
    assert problem is not None and "root" in problem and "sudo" in problem
    assert "\n" not in problem


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["interconnect.rate_gbit_s=0"], "interconnect.rate_gbit_s=0.0 must be a rate above 0"),
        (["interconnect.rate_gbit_s=1000"], "at most 400 Gbit/s"),
        (["interconnect.delay_ms=-1"], "interconnect.delay_ms=-1.0 must be >= 0"),
        (["interconnect.delay_ms=1", "interconnect.jitter_ms=2"], "must not exceed"),
        (["interconnect=pcie", "interconnect.rate_gbit_s=1"], "only with interconnect=emulated"),
    ],
)
def test_bad_link_settings_are_one_sentence_each(compose_config, tmp_path, overrides, words):
    arm = [] if overrides[0].startswith("interconnect=") else ["interconnect=emulated"]
    with pytest.raises(ConfigError) as error:
        make_plan(compose_config([*arm, *overrides]), str(tmp_path), [], CPU)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_under_torchrun_an_emulated_link_is_refused(compose_config, tmp_path):
    from linkbench.config.plan import OutsideWorld

    machine = Machine(cuda_devices=0, outside=OutsideWorld(0, 2, 2))
    with pytest.raises(ConfigError, match="cannot run under torchrun or SLURM"):
        make_plan(compose_config(["interconnect=emulated"]), str(tmp_path), [], machine)


@needs_namespaces
def test_a_delay_is_refused_in_one_sentence_where_the_kernel_has_no_netem(compose_config, tmp_path):
    problem = netns.emulation_problem(delay=True)
    if problem is None:
        pytest.skip("this kernel has netem: delays are emulated")
    with pytest.raises(ConfigError, match="no netem qdisc"):
        make_plan(
            compose_config(["interconnect=emulated", "interconnect.delay_ms=1"]), "x", [], CPU
        )


@needs_namespaces
def test_a_network_is_made_for_a_run_and_removed_with_its_lock():
    spec = netns.new_spec(1.0, 0.0, 0.0, ranks=3)
    with netns.Network(spec) as network:
        assert set(spec.namespaces) <= set(ours())
        assert (netns.LOCK_DIR / f"{spec.token}.lock").exists()
        counters = network.counters()
        assert [c["rank"] for c in counters] == [0, 1, 2]
        assert netns.sweep_stale() == [], "a live run's namespaces are never swept"
        assert set(spec.namespaces) <= set(ours())
    assert not set(spec.namespaces) & set(ours())
    assert not (netns.LOCK_DIR / f"{spec.token}.lock").exists()


# A launcher that makes a network, starts a process inside one of its namespaces, and waits
# to be killed.
ORPHAN = """
import subprocess, sys, time
from linkbench.link import netns
spec = netns.new_spec(1.0, 0.0, 0.0, ranks=2)
network = netns.Network(spec).__enter__()
subprocess.Popen(["ip", "netns", "exec", spec.rank_namespace(1), "sleep", "600"])
print(spec.token, flush=True)
time.sleep(600)
"""


@needs_namespaces
def test_what_a_killed_launcher_left_is_removed_at_the_next_start():
    process = subprocess.Popen(
        [sys.executable, "-c", ORPHAN], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        token = process.stdout.readline().strip()
        names = [n for n in ours() if token in n]
        assert len(names) == 3
        deadline = time.monotonic() + 10
        while not _in_namespaces(names) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = _in_namespaces(names)
        assert left, "the sleeper runs inside the namespace"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert set(names) <= set(ours()), "kill -9 leaves the namespaces"
    removed = netns.sweep_stale()
    assert any(token in line and "1 process(es)" in line for line in removed), removed
    assert not set(names) & set(ours())
    _wait_for(lambda: not any(alive(pid) for pid in left), 10)


@needs_namespaces
def test_an_emulated_job_runs_over_its_link_and_leaves_nothing(tmp_path):
    job = tmp_path / "job"
    done = run_cli([*ALLREDUCE, "interconnect.rate_gbit_s=2", f"hydra.run.dir={job}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(job)
    transport = result["transport"]
    assert transport["verified"] is True, transport
    assert "between emulated addresses" in transport["reason"]
    link = result["link"]
    assert link["rate_gbit_s"] == 2.0 and link["delay_ms"] == 0.0
    assert all(rank["tx_bytes"] > 8 << 20 for rank in link["ranks"])
    # The measured rate: the link probe, below the rate set and near what it lets through.
    measured = result["metrics"]["link_busbw_gb_s"]
    assert 0.8 * payload_gb_s(2.0) < measured < 1.1 * payload_gb_s(2.0)
    manifest = json.loads((job / "manifest.json").read_text())
    assert manifest["link"]["rate_gbit_s"] == 2.0
    assert manifest["config"]["interconnect"]["rate_gbit_s"] == 2.0
    hparams, _ = hparams_of_run(job)
    assert {"interconnect.rate_gbit_s", "interconnect.delay_ms"} <= hparams
    assert not [n for n in ours() if n not in BEFORE]


def _wait_for(predicate, within_s: float = 120.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.slow
@needs_namespaces
@pytest.mark.parametrize("how", ["SIGINT", "SIGKILL"])
def test_a_stopped_or_killed_emulated_job_leaves_nothing_behind(tmp_path, how):
    job = tmp_path / "job"
    args = ["interconnect=emulated", "steps=100000", "untimed_steps=1", "log_every=1", "batch=2"]
    before = set(ours())
    process = subprocess.Popen(
        [sys.executable, "run.py", *args, f"hydra.run.dir={job}"],
        cwd=REPO,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: (job / "metrics.json").exists() or process.poll() is not None)
        assert process.poll() is None, process.communicate()[1][-3000:]
        names = [n for n in ours() if n not in before]
        workers = _in_namespaces(names)
        assert names and len(workers) == 2
        process.send_signal(getattr(signal, how))
        process.wait(timeout=60)  # its output pipes stay open while a killed one's workers run
    finally:
        process.kill()
        process.stdout.close()
        process.stderr.close()
    if how == "SIGKILL":  # nothing could clean up: the next start does
        done = run_cli([*ALLREDUCE, f"hydra.run.dir={tmp_path / 'next'}"])
        assert done.returncode == 0, done.stderr[-3000:]
        assert "removed what a killed job left on this host" in done.stdout + done.stderr
    else:
        assert load_result(job)["status"] == "interrupted"
    assert not set(names) & set(ours())
    _wait_for(lambda: not any(alive(pid) for pid in workers), 10)


BEFORE = set(ours()) if PROBLEM is None else set()


SPEC = LinkSpec("0123abcd", 1.0, 0.0, 0.0, ranks=2)
SOCKETS = check_connections([("10.77.0.1", "10.77.0.2")], SPEC, rank=0)
RANKS = [{"rank": r, "tx_bytes": 50_000_000} for r in range(2)]
SENT = {"sockets": SOCKETS, "ranks": RANKS, "probe_bytes": 8 << 20}


def _nccl(verified: bool | None, reason: str = "2 NET channel connections") -> dict:
    return {"transport": "NET", "expected": "NET", "verified": verified, "reason": reason}


@pytest.mark.parametrize(
    ("link", "nccl", "verified", "words"),
    [
        (
            {"sockets": SOCKETS, "ranks": RANKS, "probe_bytes": 8 << 20},
            _nccl(None),
            True,
            "ran over",
        ),
        (
            {"sockets": SOCKETS, "ranks": RANKS, "probe_bytes": 8 << 20},
            _nccl(True),
            True,
            "NCCL: 2 NET",
        ),
        ({"sockets": SOCKETS, "ranks": RANKS}, _nccl(False, "NCCL used SHM"), False, "SHM"),
        ({"sockets": SOCKETS, "ranks": RANKS, "probe_bytes": 64 << 20}, _nccl(None), False, "less"),
        ({"ranks": RANKS}, _nccl(None), None, "before rank 0 checked"),
    ],
)
def test_the_transport_check_of_an_emulated_arm(link, nccl, verified, words):
    """gloo (NCCL's check says None) or NCCL: verified only when the sockets ran over the link,
    every rank sent what the probe must, and NCCL (when it ran) used only NET."""
    from linkbench.link.transport import verify_link

    check = verify_link(link, nccl)
    assert check["verified"] is verified and words in check["reason"], check
    assert check["transport"].startswith("emulated link")


ENTER = """
import json, os, sys
from linkbench.link.emulated import LinkSpec, enter
spec = LinkSpec(*sys.argv[1:2], 1.0, 0.0, 0.0, 2)
enter(spec, 1)
devices = [line.split(":")[0].strip() for line in open("/proc/net/dev").readlines()[2:]]
print(json.dumps({"devices": sorted(devices), "gloo": os.environ["GLOO_SOCKET_IFNAME"],
                  "nccl": os.environ["NCCL_SOCKET_IFNAME"]}))
"""


@needs_namespaces
def test_a_worker_that_enters_its_namespace_sees_only_its_link_and_names_it():
    spec = netns.new_spec(1.0, 0.0, 0.0, ranks=2)
    with netns.Network(spec):
        done = subprocess.run([sys.executable, "-c", ENTER, spec.token], cwd=REPO,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "devices": sorted(["lo", spec.ifname]),
        "gloo": spec.ifname,
        "nccl": spec.ifname,
    }
