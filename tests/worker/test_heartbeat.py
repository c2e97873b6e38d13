"""The heartbeat names a rank that stopped responding, from real processes beating into a
real TCPStore: stopped by a signal, gone, behind in its steps, or never started."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import torch.distributed as dist

from linkbench.worker import heartbeat

from ..conftest import REPO, clean_env

BEATING = (
    "import sys, time; from linkbench.worker import heartbeat; heartbeat.at_step(7); "
    "heartbeat.Heartbeat('127.0.0.1', int(sys.argv[1]), 1, 3); print('beating', flush=True); "
    "time.sleep(600)"
)


@pytest.fixture
def store():
    return dist.TCPStore("127.0.0.1", 0, None, is_master=True)


@pytest.mark.slow  # 50 s of real processes and heartbeats; CI's slow part runs it
def test_a_stopped_a_gone_a_lagging_and_a_silent_rank_are_each_named(store):
    peer = subprocess.Popen([sys.executable, "-c", BEATING, str(store.port)], cwd=REPO,
                            env=clean_env(), stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert peer.stdout is not None and peer.stdout.readline().strip() == "beating"
        heartbeat.at_step(7)
        me = heartbeat.Heartbeat("127.0.0.1", store.port, 0, 3)
        found = me.unresponsive()
        assert list(found) == [2] and "never beat" in found[2]  # rank 2 never started
        heartbeat.at_step(9)  # rank 1's beat is live but two steps behind this rank's
        assert "at step 7, behind step 9: busy outside the collective" in me.unresponsive()[1]
        heartbeat.at_step(7)
        peer.send_signal(signal.SIGSTOP)
        stopped = me.unresponsive()[1]
        assert stopped.startswith("no heartbeat for ") and "(the last from step 7)" in stopped
        assert "its process is stopped (SIGSTOP" in stopped
        peer.kill()
        peer.wait()
        assert "its process is gone" in me.unresponsive(watch_s=0)[1]
        me.stop()
    finally:
        peer.kill()
        peer.wait()
        heartbeat.at_step(0)


@pytest.mark.parametrize(
    ("message", "is_timeout"),
    [
        ("Application timeout caused pair closure", True),  # gloo, torch 2.14
        (
            "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting "
            "20000ms for recv operation to complete",
            True,
        ),  # gloo, as the issue saw it
        (
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
            "OpType=ALLREDUCE, Timeout(ms)=20000) ran for 20001 milliseconds",
            True,
        ),  # NCCL
        ("Connection closed by peer [127.0.0.1]:4242", False),
        ("CUDA out of memory. Tried to allocate 2.00 GiB", False),
    ],
)
def test_a_timeout_is_told_from_other_failures(message, is_timeout):
    assert heartbeat.timed_out(RuntimeError(message)) is is_timeout


def test_one_rank_has_no_heartbeat_and_no_store_is_no_error(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    assert heartbeat.start(0, 1, None) is None
    assert heartbeat.start(0, 2, None) is None
