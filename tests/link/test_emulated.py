"""The emulated link: its names and arithmetic, the refusals, and its namespaces, which are
made for a run and gone after it however it ends (kill -9 included: the next start removes
what a killed one left, and stops what still ran in it), with no signal's window to leak
them; and only what a run recorded that it made is ever removed or stopped (a look-alike
namespace, a live job whose files were deleted, a process nobody recorded, are left)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from linkbench.config.machine import Machine
from linkbench.errors import ConfigError
from linkbench.launcher.planning import plan_job
from linkbench.link import netns, records
from linkbench.link.emulated import (
    BUCKET_SHARE,
    LIMIT_TOLERANCE,
    PROBE_BYTES,
    PROBE_LIMIT_S,
    PROBE_MAX_CALLS,
    PROBE_MIN_CALLS,
    LinkSpec,
    above_limit,
    address,
    burst_bytes,
    check_connections,
    min_rate_gbit_s,
    own_connections,
    payload_gb_s,
    probe_calls,
    probe_estimate_s,
    rate_problem,
    rate_warning,
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
    """The namespaces on this host named like linkbench's (look-alikes included)."""
    listed = json.loads(netns.run("ip", "-j", "netns", "list") or "[]")
    return [entry["name"] for entry in listed if entry["name"].startswith("linkbench-")]


def _in_namespaces(names: list[str]) -> list[int]:
    """The processes running in the namespaces that still exist."""
    present = set(ours())
    return [
        int(p) for n in names if n in present for p in netns.run("ip", "netns", "pids", n).split()
    ]


def _records(token: str) -> list[str]:
    """The record files run ``token`` left in /run/linkbench."""
    return sorted(p.name for p in records.RECORD_DIR.glob(f"{token}*"))


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
        ([], False, "no connection to another node"),
    ],
)
def test_the_socket_check_passes_only_connections_between_emulated_addresses(
    connections, verified, words
):
    check = check_connections(connections, LinkSpec("0123abcd", 1.0, 0.0, 0.0, 3), rank=0)
    assert check["verified"] is verified and words in check["reason"]


def test_ranks_of_a_node_share_its_namespace_and_address():
    """4 ranks in 2 nodes: ranks 0-1 on node 0, 2-3 on node 1; rank 1's connection to rank
    0 stays inside the node (its own address), one to rank 2 crosses the uplink."""
    spec = LinkSpec("0123abcd", 1.0, 0.0, 0.0, 4, nodes=2)
    assert spec.node_count == 2 and spec.ranks_per_node == 2
    assert [spec.rank_namespace(r) for r in range(4)] == [spec.node_namespace(0)] * 2 + [
        spec.node_namespace(1)
    ] * 2
    assert spec.namespaces == [spec.switch, spec.node_namespace(0), spec.node_namespace(1)]
    assert [spec.rank_address(r) for r in range(4)] == ["10.77.0.1"] * 2 + ["10.77.0.2"] * 2
    check = check_connections([("10.77.0.1", "10.77.0.1"), ("10.77.0.1", "10.77.0.2")], spec, 1)
    assert check["verified"] and check["to_peers"] == 1 and check["to_itself"] == 1
    inside = check_connections([("10.77.0.1", "10.77.0.1")], spec, 1)
    assert not inside["verified"] and "no connection to another node" in inside["reason"]
    one_node = LinkSpec("0123abcd", 1.0, 0.0, 0.0, 4, nodes=1)
    assert check_connections([("10.77.0.1", "10.77.0.1")], one_node, 3)["verified"]
    assert spec.settings()["nodes"] == 2 and spec.settings()["ranks_per_node"] == 2


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
        (["interconnect.rate_gbit_s=1e-9"], "below the slowest rate tc can shape a link to"),
        (["interconnect.rate_gbit_s=1e-7"], "set at least 0.0036 Gbit/s"),
        (["interconnect.rate_gbit_s=0.0001"], "would hold the link probe"),
        (["interconnect.rate_gbit_s=0.0001"], "for about 35 min, more than the 60 s allowed"),
        (["interconnect.delay_ms=-1"], "interconnect.delay_ms=-1.0 must be >= 0"),
        (["interconnect.delay_ms=1", "interconnect.jitter_ms=2"], "must not exceed"),
    ],
)
def test_bad_link_settings_are_one_sentence_each(compose_config, tmp_path, overrides, words):
    with pytest.raises(ConfigError) as error:
        plan_job(compose_config(["interconnect=emulated", *overrides]), str(tmp_path), [], CPU)
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("setting", ["rate_gbit_s=1", "nodes=2"])
def test_a_link_setting_cannot_be_written_for_an_arm_that_makes_no_link(setting):
    """The link's settings are interconnect=emulated's own keys: another arm has none of them,
    so Hydra refuses them as it composes (before: the plan refused them by a check)."""
    done = run_cli(["interconnect=pcie", f"interconnect.{setting}"], timeout=120)
    key = setting.partition("=")[0]
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"interconnect.{key} is not a key of interconnect=pcie; interconnect=emulated has it."
    )


def test_under_torchrun_an_emulated_link_is_refused(compose_config, tmp_path):
    from linkbench.config.machine import OutsideWorld

    machine = Machine(cuda_devices=0, outside=OutsideWorld(0, 2, 2))
    with pytest.raises(ConfigError, match="cannot run under torchrun or SLURM"):
        plan_job(compose_config(["interconnect=emulated"]), str(tmp_path), [], machine)


@needs_namespaces
def test_a_delay_is_refused_in_one_sentence_where_the_kernel_has_no_netem(compose_config, tmp_path):
    problem = netns.emulation_problem(delay=True)
    if problem is None:
        pytest.skip("this kernel has netem: delays are emulated")
    with pytest.raises(ConfigError, match="no netem qdisc"):
        plan_job(compose_config(["interconnect=emulated", "interconnect.delay_ms=1"]), "x", [], CPU)


def test_the_slowest_rate_is_the_one_whose_probe_fits_in_a_minute():
    """The link probe (3 all_reduce calls of 8 MiB at slow rates) at 0.0001 Gbit/s takes over
    half an hour; the slowest rate taken for n ranks is the one that probes within PROBE_LIMIT_S."""
    assert 30 * 60 < probe_estimate_s(0.0001, 2) < 40 * 60
    assert probe_estimate_s(1.0, 1) == 0.0
    for ranks in (2, 3, 8, 128):
        slowest = min_rate_gbit_s(ranks)
        assert probe_estimate_s(slowest, ranks) <= PROBE_LIMIT_S
        assert rate_problem(slowest, ranks) is None
        problem = rate_problem(0.9 * slowest, ranks)
        assert problem is not None and f"set at least {slowest:g} Gbit/s" in problem
        assert "\n" not in problem
    assert min_rate_gbit_s(3) > min_rate_gbit_s(2), "each rank's link carries more with more ranks"


@pytest.mark.parametrize("ranks", [2, 3, 8])
def test_the_probe_window_holds_the_buckets_burst_to_a_small_share(ranks):
    """Bytes through a token bucket in t are at most burst + rate x t: the probe's window of
    back-to-back calls carries enough bytes that a full bucket adds at most BUCKET_SHARE to
    the rate read, wherever the call count is not capped (a rate no host delivers unshaped);
    before, the fastest of 2 calls, each after a barrier (a full bucket), read up to 103 %."""
    for rate in (0.01, 0.1, 1.0, 1.5, 4.0, 10.0, 400.0):
        calls = probe_calls(rate, ranks)
        assert PROBE_MIN_CALLS <= calls <= PROBE_MAX_CALLS
        link_bytes = calls * PROBE_BYTES * 2 * (ranks - 1) / ranks
        assert calls == PROBE_MAX_CALLS or burst_bytes(rate) / link_bytes <= BUCKET_SHARE
    assert probe_calls(1.0, 2) < probe_calls(4.0, 2), "a faster link's bucket holds more"


def test_a_reading_above_what_the_link_carries_is_a_measurement_error():
    spec = LinkSpec("0123abcd", 1.0, 0.0, 0.0, ranks=2)
    limit = payload_gb_s(1.0)
    assert above_limit(spec, limit, "x") is None
    assert above_limit(spec, limit * (1 + LIMIT_TOLERANCE / 2), "x") is None
    said = above_limit(spec, 1.054 * limit, "the link probe")
    assert said is not None and said.startswith("the link probe read 0.126 GB/s, 105.4% of")
    assert "interconnect.rate_gbit_s=1 carries" in said and "measurement error" in said
    assert "\n" not in said
    assert above_limit(LinkSpec("0123abcd", 1.0, 0.0, 0.0, ranks=1), 1.0, "x") is None


def test_a_collective_size_above_the_link_is_marked_and_left_out_of_the_peak():
    """Before: a 64 KiB all_reduce read 0.126 GB/s on a 1 Gbit/s link (a burst through the
    bucket) and could be the task's headline peak."""
    from linkbench.worker.collectives import format_table, mark_above_limit, peak

    limit = payload_gb_s(1.0)
    rows = [
        {"op": "all_reduce", "bytes": b, "time_us": 1.0, "algbw_gb_s": bw, "busbw_gb_s": bw}
        for b, bw in ((65536, 1.05 * limit), (1 << 20, 0.99 * limit), (4 << 20, 0.98 * limit))
    ]
    assert peak(rows)["bytes"] == 65536, "without a link, the highest"
    mark_above_limit(rows, LinkSpec("0123abcd", 1.0, 0.0, 0.0, ranks=2))
    assert [r["above_limit"] for r in rows] == [True, False, False]
    assert peak(rows)["bytes"] == 1 << 20
    table = format_table(rows)
    assert table.count("(above the link)") == 2 and "left out of the peak" in table


def test_a_probe_well_below_the_rate_is_a_warning_of_one_sentence():
    spec = LinkSpec("0123abcd", 400.0, 0.0, 0.0, ranks=2)
    warning = rate_warning(spec, 0.024 * payload_gb_s(400.0))
    assert warning is not None and "2.4%" in warning and "interconnect.rate_gbit_s=400" in warning
    assert "\n" not in warning
    assert rate_warning(spec, 0.85 * payload_gb_s(400.0)) is None
    assert rate_warning(LinkSpec("0123abcd", 400.0, 0.0, 0.0, ranks=1), 0.0) is None


@needs_namespaces
def test_a_network_is_made_for_a_run_and_removed_with_its_record():
    spec = netns.new_spec(1.0, 0.0, 0.0, ranks=3)
    with netns.Network(spec) as network:
        assert set(spec.namespaces) <= set(ours())
        record = json.loads(records.network_path(spec.token).read_text())
        assert record["token"] == spec.token and record["boot_id"] == records.boot_id()
        assert record["launcher"] == {
            "pid": os.getpid(),
            "start_time": records.start_time(os.getpid()),
        }
        assert record["namespaces"] == {n: records.namespace_inode(n) for n in spec.namespaces}
        counters = network.counters()
        assert [(c["node"], c["ranks"]) for c in counters] == [(0, [0]), (1, [1]), (2, [2])]
        assert netns.sweep_stale() == [], "a live run's namespaces are never swept"
        assert set(spec.namespaces) <= set(ours())
    assert not set(spec.namespaces) & set(ours())
    assert _records(spec.token) == []


@needs_namespaces
def test_a_cluster_network_has_one_namespace_and_one_uplink_per_node():
    """4 ranks in 2 nodes: a switch and two node namespaces, each node's uplink counted with
    its ranks; all removed with the record."""
    spec = netns.new_spec(1.0, 0.0, 0.0, ranks=4, nodes=2)
    with netns.Network(spec) as network:
        assert set(spec.namespaces) <= set(ours()) and len(spec.namespaces) == 3
        counters = network.counters()
        assert [(c["node"], c["ranks"]) for c in counters] == [(0, [0, 1]), (1, [2, 3])]
        assert all(c["shaper_out"] and c["shaper_in"] for c in counters), "each uplink shaped"
    assert not set(spec.namespaces) & set(ours())
    assert _records(spec.token) == []


def test_a_refused_rate_for_the_runs_ranks_makes_nothing():
    """The config's checks take the fewest ranks that probe a link; the network refuses,
    before it makes or records anything, a rate whose probe on its ranks takes too long."""
    spec = netns.new_spec(min_rate_gbit_s(2), 0.0, 0.0, ranks=3)
    with pytest.raises(ConfigError, match="over 3 ranks"), netns.Network(spec):
        pass
    assert not set(spec.namespaces) & set(ours())
    assert _records(spec.token) == []


# A worker stand-in: records itself and enters rank 1's namespace, as a job's workers do.
WORKER = """
import sys, time
from linkbench.link.emulated import LinkSpec, enter
enter(LinkSpec(sys.argv[1], 1.0, 0.0, 0.0, 2), 1)
print("entered", flush=True)
time.sleep(600)
"""
# A launcher stand-in: makes a network (for its lifetime: `with`, or left made: `enter`),
# starts a worker in it, says the token and the worker's pid, and waits.
LAUNCHER = """
import subprocess, sys, time
from linkbench.link import netns
spec = netns.new_spec(1.0, 0.0, 0.0, ranks=2)
def serve():
    worker = subprocess.Popen([sys.executable, "-c", sys.argv[2], spec.token],
                              stdout=subprocess.PIPE, text=True)
    assert worker.stdout.readline().strip() == "entered"
    print(spec.token, worker.pid, flush=True)
    time.sleep(600)
if sys.argv[1] == "with":
    with netns.Network(spec):
        serve()
else:
    netns.Network(spec).__enter__()
    serve()
"""


def _launcher(how: str) -> tuple[subprocess.Popen, str, int]:
    """A process holding a network with a recorded worker in it: (process, token, worker)."""
    process = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, how, WORKER],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = process.stdout.readline().split()
    assert len(line) == 2, process.communicate(timeout=30)[1][-3000:]
    return process, line[0], int(line[1])


def _sleeper_in(name: str) -> subprocess.Popen:
    """A process nobody recorded, inside namespace ``name`` (an administrator's, say)."""
    sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"])
    _wait_for(lambda: sleeper.pid in _in_namespaces([name]), 10)
    return sleeper


@needs_namespaces
def test_what_a_killed_launcher_left_is_removed_at_the_next_start():
    """kill -9 leaves the namespaces and the worker; the next sweep stops the worker it
    recorded and removes the namespaces, except one that holds a process no run started (an
    administrator's, say): that one is left with its process, and named with it (before, it
    was removed under the process, said only as "removed what a killed job left"); once
    that process has ended, the next sweep removes it."""
    process, token, worker = _launcher("enter")
    names = [n for n in ours() if token in n]
    assert len(names) == 3
    held = f"linkbench-{token}-node1"
    foreign = _sleeper_in(held)
    try:
        process.send_signal(signal.SIGKILL)
        process.wait()
        process.stdout.close()
        process.stderr.close()
        assert set(names) <= set(ours()), "kill -9 leaves the namespaces"
        assert alive(worker)
        removed = netns.sweep_stale()
        line = next(line for line in removed if token in line)
        assert "2 namespace(s)" in line and " 1 process(es)" in line, line
        assert f"left alone, as it holds process(es) that run did not start: {held} with " \
            f"pid {foreign.pid} (sleep 600)" in line, line  # fmt: skip
        assert set(ours()) & set(names) == {held}
        _wait_for(lambda: not alive(worker), 10)
        assert alive(foreign.pid), "a process no run recorded is never stopped"
        assert _records(token), "kept, so that a later job removes what was left"
    finally:
        foreign.kill()
        foreign.wait()
    again = netns.sweep_stale()
    assert any(token in line and "1 namespace(s)" in line for line in again), again
    assert not set(names) & set(ours()) and _records(token) == []


@needs_namespaces
def test_a_launcher_is_known_by_its_pid_and_start_time():
    """A record whose launcher runs is left alone; one whose pid now belongs to another
    process (another start time: a pid reused) is a killed launcher's, and is swept."""
    process, token, worker = _launcher("enter")
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stdout.close()
    process.stderr.close()
    names = [n for n in ours() if token in n]
    try:
        path = records.network_path(token)
        left = json.loads(path.read_text())
        me = {"pid": os.getpid(), "start_time": records.start_time(os.getpid())}
        path.write_text(json.dumps({**left, "launcher": me}))
        assert netns.sweep_stale() == [] and set(names) <= set(ours()) and alive(worker)
        reused = {**me, "start_time": me["start_time"] - 1}
        path.write_text(json.dumps({**left, "launcher": reused}))
        assert any(token in line for line in netns.sweep_stale())
        assert not set(names) & set(ours())
        _wait_for(lambda: not alive(worker), 10)
    finally:
        if alive(worker):  # this test's own worker, where the sweep did not stop it
            os.kill(worker, signal.SIGKILL)


@needs_namespaces
def test_a_live_job_whose_files_were_deleted_keeps_its_network_and_workers():
    """Liveness is the launcher's pid and start time, not a file: with its lock file (as
    linkbench had) and then its records deleted, another job's start and the stale sweep
    leave a live job's network and worker alone; its own end still removes them."""
    process, token, worker = _launcher("with")
    names = [n for n in ours() if token in n]
    try:
        assert len(names) == 3
        for lock in records.RECORD_DIR.glob(f"{token}*.lock"):
            lock.unlink()
        assert netns.sweep_stale() == []
        with netns.Network(netns.new_spec(1.0, 0.0, 0.0, ranks=1)) as other:
            assert other.stale == []
        assert set(names) <= set(ours()) and alive(worker)
        for record in _records(token):
            (records.RECORD_DIR / record).unlink()
        assert netns.sweep_stale() == []
        assert set(names) <= set(ours()) and alive(worker)
        process.send_signal(signal.SIGTERM)  # the launcher ends: its network with it
        process.wait(timeout=60)
    finally:
        process.kill()
        process.stdout.close()
        process.stderr.close()
    assert not set(names) & set(ours())
    _wait_for(lambda: not alive(worker), 10)


@needs_namespaces
def test_a_namespace_that_only_looks_like_linkbenchs_is_never_touched():
    """A namespace named like linkbench's without a record (a decoy, or one an older
    linkbench left) survives every sweep and every start, and so does what runs in it."""
    decoys = ["linkbench-decoy-node0", "linkbench-0badcafe-node0"]
    sleepers = []
    try:
        for name in decoys:
            netns.run("ip", "netns", "add", name)
            sleepers.append(_sleeper_in(name))
        assert netns.sweep_stale() == []
        spec = netns.new_spec(1.0, 0.0, 0.0, ranks=2)
        with netns.Network(spec) as network:
            assert network.stale == []
        assert set(decoys) <= set(ours())
        assert all(alive(sleeper.pid) for sleeper in sleepers)
        assert {p for name in decoys for p in _in_namespaces([name])} == {s.pid for s in sleepers}
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
        for name in decoys:
            if name in ours():
                netns.run("ip", "netns", "delete", name)


@needs_namespaces
def test_an_emulated_job_runs_over_its_link_and_leaves_nothing(tmp_path):
    """At 1 Gbit/s: two gloo ranks on 2 busy cores keep up with it (at 2 Gbit/s, under the
    suite's own load, the probe once read 58 % of the rate: the cores, not the link)."""
    job = tmp_path / "job"
    rate = 1.0
    iters = 8  # the 8 MiB row's window carries over 100 buckets' worth (below)
    done = run_cli([*ALLREDUCE, f"task.iters={iters}", f"interconnect.rate_gbit_s={rate:g}",
                    f"hydra.run.dir={job}"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(job)
    transport = result["transport"]
    assert transport["verified"] is True, transport
    assert "between emulated addresses" in transport["reason"]
    link = result["link"]
    assert link["rate_gbit_s"] == rate and link["delay_ms"] == 0.0
    assert all(uplink["tx_bytes"] > 8 << 20 for uplink in link["uplinks"])
    # The measured rate: the link probe, below the rate set and near what it lets through.
    measured = result["metrics"]["link_busbw_gb_s"]
    assert 0.8 * payload_gb_s(rate) < measured <= (1 + LIMIT_TOLERANCE) * payload_gb_s(rate)
    assert "above_limit" not in link and link["probe_calls"] == probe_calls(rate, 2)
    # A timed window that carries 1/LIMIT_TOLERANCE buckets' worth is the rate, by physics.
    long = [r for r in result["collectives"]
            if iters * r["bytes"] * LIMIT_TOLERANCE >= burst_bytes(rate)]  # fmt: skip
    assert long and not [r for r in long if r["above_limit"]], "a long transfer is the rate"
    manifest = json.loads((job / "manifest.json").read_text())
    assert manifest["link"]["rate_gbit_s"] == rate
    assert manifest["config"]["interconnect"]["rate_gbit_s"] == rate
    hparams, _ = hparams_of_run(job)
    assert {"interconnect.rate_gbit_s", "interconnect.delay_ms"} <= hparams
    assert not [n for n in ours() if n not in BEFORE]


@needs_namespaces
def test_a_link_of_one_rank_records_no_figure_of_a_link(tmp_path):
    """interconnect=emulated devices=1: nothing crosses the link. Before, result.json and
    TensorBoard held link_busbw_gb_s 0.0 from a 0.1 ms "probe" of 2 calls, and uplink bytes
    of 0.0, and the transport said "one node" of one rank."""
    job = tmp_path / "job"
    done = run_cli(["interconnect=emulated", "devices=1", "steps=12", "task.no_sync_steps=0",
                    f"hydra.run.dir={job}"])  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(job)
    assert not [k for k in result["metrics"] if "link" in k or "uplink" in k], result["metrics"]
    assert "measured_busbw_gb_s" not in result["link"] and "per_step" not in result["link"]
    assert result["transport"]["reason"].startswith("one rank: nothing crosses the link")
    assert "no link (one rank)" in done.stderr + done.stdout


@needs_namespaces
def test_a_rate_the_host_cannot_deliver_is_warned_about_and_recorded(tmp_path):
    job = tmp_path / "job"
    done = run_cli([*ALLREDUCE, "interconnect.rate_gbit_s=400", f"hydra.run.dir={job}"])
    assert done.returncode == 0, done.stderr[-3000:]
    warning = load_result(job)["link"]["rate_warning"]
    assert "interconnect.rate_gbit_s=400" in warning and "cannot deliver the rate" in warning
    assert f"!!! {warning}" in done.stdout + done.stderr


@needs_namespaces
def test_a_probe_too_slow_for_the_jobs_ranks_is_refused_before_anything_starts(tmp_path):
    job = tmp_path / "job"
    before = set(ours())
    rate = min_rate_gbit_s(2)  # the config's checks pass it: 2 ranks probe in time, 3 do not
    done = run_cli([*ALLREDUCE, "devices=3", f"interconnect.rate_gbit_s={rate}",
                    f"hydra.run.dir={job}"])  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    said = done.stderr.strip()
    assert "over 3 ranks" in said and "\n" not in said and "Traceback" not in said, said
    assert not (job / "logs").exists() or not list((job / "logs").glob("rank*")), "no worker"
    assert set(ours()) == before


def _new_runs(before: set[str]) -> set[str]:
    """Tokens of the networks made since ``before`` (names under /run/netns)."""
    try:
        names = set(os.listdir(records.NETNS_DIR)) - before
    except FileNotFoundError:
        return set()
    return {name.split("-")[1] for name in names if name.startswith("linkbench-")}


@needs_namespaces
@pytest.mark.parametrize(
    ("how", "when"),
    [("SIGTERM", "making"), ("SIGINT", "making"), ("SIGTERM", "made")],
)
def test_a_stop_while_the_network_is_made_leaks_nothing_and_says_one_line(tmp_path, how, when):
    """A stop while the job's network (8 ranks) is being made, or as it is finished, before
    any worker: the job ends as a stop during training does (one line, 128 + the signal,
    result.json says interrupted), and nothing of the network is left."""
    job = tmp_path / "job"
    before = set(os.listdir(records.NETNS_DIR)) if os.path.isdir(records.NETNS_DIR) else set()
    process = subprocess.Popen(
        [sys.executable, "run.py", *ALLREDUCE, "devices=8", f"hydra.run.dir={job}"],
        cwd=REPO,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    tokens: set[str] = set()
    try:

        def ready() -> bool:
            """The job's own network (the one with a rank 1; the config's check makes one of
            a single rank) is being made, or its last step (rank 7's shaping) is done."""
            names = os.listdir(records.NETNS_DIR) if os.path.isdir(records.NETNS_DIR) else []
            for token in _new_runs(before):
                if when == "making" and f"linkbench-{token}-node1" in names:
                    tokens.add(token)
                last = f"linkbench-{token}-node7"
                if when == "made" and last in names:
                    shown = subprocess.run(
                        ["tc", "-n", last, "qdisc", "show", "dev", f"lb{token}"],
                        capture_output=True,
                        text=True,
                    )
                    if "tbf" in shown.stdout:
                        tokens.add(token)
            return bool(tokens) or process.poll() is not None

        deadline = time.monotonic() + 120
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.001)
        assert tokens, f"no network seen being made: {process.poll()}"
        process.send_signal(getattr(signal, how))
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 128 + getattr(signal, how), err[-3000:]
    assert "Traceback" not in out + err, err[-3000:]
    assert err.strip().splitlines()[-1].endswith(f"stopped by {how}, with its workers"), err
    assert load_result(job)["status"] == "interrupted"
    token = tokens.pop()
    assert not [n for n in ours() if token in n], "the network is removed"
    assert _records(token) == []
    assert not list((job / "logs").glob("rank*")), "no worker started"


@needs_namespaces
@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv (util-linux) is missing")
@pytest.mark.skipif(os.geteuid() != 0, reason="becomes another user with setpriv: needs root")
def test_without_root_but_with_the_capabilities_one_sentence_says_what_to_do(tmp_path):
    """A user with CAP_NET_ADMIN and CAP_SYS_ADMIN (as docs/emulated.md names them) may not
    write /run/linkbench nor /run/netns: one sentence, exit 2, before any worker starts.
    (CAP_DAC_READ_SEARCH only lets the user read this checkout and its interpreter.)"""
    # Under /tmp itself: pytest's own directories are root's alone.
    outputs = Path(tempfile.mkdtemp(prefix="linkbench-nobody-", dir="/tmp"))
    outputs.chmod(0o777)
    job = outputs / "job"
    caps = "+net_admin,+sys_admin,+dac_read_search"
    become = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
              f"--inh-caps={caps}", f"--ambient-caps={caps}"]  # fmt: skip
    env = clean_env() | {"HOME": str(outputs)}
    try:
        if subprocess.run([*become, sys.executable, "-c", "import linkbench"], cwd=REPO,
                          env=env, capture_output=True).returncode != 0:  # fmt: skip
            pytest.skip("user 65534 cannot run this checkout's Python here")
        before = set(ours())
        done = subprocess.run(
            [*become, sys.executable, "run.py", *ALLREDUCE, f"hydra.run.dir={job}"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        ran = (job / "logs").exists() and list((job / "logs").glob("rank*"))
    finally:
        shutil.rmtree(outputs, ignore_errors=True)
    said = done.stderr.strip()
    assert done.returncode == 2, said[-3000:]
    assert "Traceback" not in said and "\n" not in said, said
    assert "/run/linkbench" in said and "run as root" in said, said
    assert not ran, "no worker started"
    # None of its own left: a namespace another test (another xdist worker) made meanwhile
    # is gone when that test ends, one this run left stays.
    _wait_for(lambda: set(ours()) <= before)


def _wait_for(predicate, within_s: float = 120.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


@pytest.mark.slow
@needs_namespaces
@pytest.mark.parametrize(
    ("how", "layout"),
    [("SIGINT", []), ("SIGKILL", []),
     ("SIGTERM", ["interconnect.nodes=2", "devices=4"]),
     ("SIGKILL", ["interconnect.nodes=2", "devices=4"])],
    ids=["SIGINT", "SIGKILL", "SIGTERM-2x2", "SIGKILL-2x2"],
)  # fmt: skip
def test_a_stopped_or_killed_emulated_job_leaves_nothing_behind(tmp_path, how, layout):
    """The two-rank link and a cluster of 2 nodes x 2 ranks (every rank of a node in the
    node's namespace): Ctrl-C and SIGTERM remove what the job made; after kill -9 the next
    start does, and stops what still ran in it."""
    job = tmp_path / "job"
    args = ["interconnect=emulated", "steps=100000", "untimed_steps=1", "log_every=1", "batch=2",
            *layout]  # fmt: skip
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
        assert names and len(workers) == (4 if layout else 2)
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
RANKS = [{"node": n, "ranks": [n], "tx_bytes": 50_000_000} for n in range(2)]
SENT = {"sockets": SOCKETS, "uplinks": RANKS, "probe_bytes": 8 << 20}


def _shaped(held: int, passed: int = 50_000_000) -> list[dict]:
    bucket = {"bytes": passed, "packets": 1000, "overlimits": held, "drops": 0}
    return [{**r, "shaper_out": bucket, "shaper_in": bucket} for r in RANKS]


def _nccl(verified: bool | None, reason: str = "2 NET channel connections") -> dict:
    return {"transport": "NET", "expected": "NET", "verified": verified, "reason": reason}


@pytest.mark.parametrize(
    ("link", "nccl", "verified", "words"),
    [
        (
            {"sockets": SOCKETS, "uplinks": RANKS, "probe_bytes": 8 << 20},
            _nccl(None),
            True,
            "ran over",
        ),
        (
            {"sockets": SOCKETS, "uplinks": RANKS, "probe_bytes": 8 << 20},
            _nccl(True),
            True,
            "NCCL: 2 NET",
        ),
        ({"sockets": SOCKETS, "uplinks": RANKS}, _nccl(False, "NCCL used SHM"), False, "SHM"),
        ({**SENT, "probe_bytes": 64 << 20}, _nccl(None), False, "less"),
        ({"uplinks": RANKS}, _nccl(None), None, "before rank 0 checked"),
        # One rank (devices=1): nothing crosses, so nothing is verified (before: "verified",
        # "all 0 TCP connections ... 0.0 MB").
        ({"sockets": SOCKETS, "uplinks": RANKS[:1]}, _nccl(None), None, "one rank: nothing"),
        # One node of two ranks (interconnect.nodes=1): the same, said of the node.
        (
            {"sockets": SOCKETS, "uplinks": [{**RANKS[0], "ranks": [0, 1]}]},
            _nccl(None),
            None,
            "one node: nothing",
        ),
        # The token buckets' own counters (tc -s qdisc) witness the shaping, or its absence.
        ({"sockets": SOCKETS, "uplinks": _shaped(held=40)}, _nccl(None), True, "held back 160"),
        ({"sockets": SOCKETS, "uplinks": _shaped(held=0)}, _nccl(None), True, "never held"),
        ({"sockets": SOCKETS, "uplinks": _shaped(0, 0)}, _nccl(None), False, "passed no bytes"),
        # A probe reading above what the link carries: the rate read is not the link's.
        (
            {"sockets": SOCKETS, "uplinks": _shaped(held=40), "above_limit": "the link probe read"},
            _nccl(None),
            False,
            "the link probe read",
        ),
    ],
)
def test_the_transport_check_of_an_emulated_arm(link, nccl, verified, words):
    """gloo (NCCL's check says None) or NCCL: verified only when the sockets ran over the link,
    every rank sent what the probe must, and NCCL (when it ran) used only NET."""
    from linkbench.link.transport import verify_link

    check = verify_link(link, nccl)
    assert check["verified"] is verified and words in check["reason"], check
    assert check["transport"].startswith("emulated link")


def test_connections_are_read_from_ipv6_tables_too():
    """The rendezvous store listens dual-stack, so its connections are IPv4 mapped into IPv6
    (/proc/net/tcp6), which were never read; and a connection seen after the link probe
    counts, so a peer that closed its side before the task ended hides none."""
    from linkbench.link.emulated import _hex_address

    assert _hex_address("0100007F") == "127.0.0.1"
    mapped = "0000000000000000FFFF00000100004D"  # ::ffff:77.0.0.1 as the kernel writes it
    assert _hex_address(mapped) == "77.0.0.1"
    assert _hex_address("00000000000000000000000001000000") == "::1"


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
