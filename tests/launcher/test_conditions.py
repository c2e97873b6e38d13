"""The launcher reads the GPUs a job can see, as CUDA names them, not every GPU NVML lists,
and the CPU seconds from which the other programs' share of the cores during a run is told
apart from the run's own (its process tree) and the kernel's."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from linkbench.analysis.conditions import host_work
from linkbench.launcher import conditions
from linkbench.launcher.conditions import visible_gpus

UUIDS = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-abcd-3333"]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [(0, "0"), (1, "1"), (2, "2")]),  # unset: every GPU
        ("2,0", [(2, "2"), (0, "0")]),  # CUDA's order, not NVML's
        ("GPU-b", [(1, "GPU-b")]),  # a UUID prefix
        ("1,7,2", [(1, "1")]),  # CUDA stops at the first entry that names no GPU
        ("GPU-a", []),  # an ambiguous prefix names none
        ("MIG-x", []),
    ],
)
def test_visible_gpus_follow_cuda_visible_devices(visible, expected):
    assert visible_gpus(visible, len(UUIDS), UUIDS.__getitem__) == expected


def test_an_empty_cuda_visible_devices_reads_no_gpu_and_says_why(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    point = conditions.snapshot()
    assert point["gpus"] == [] and "CUDA_VISIBLE_DEVICES" in point["gpus_unavailable"]
    assert point["cpus"] >= 1 and 1 <= point["cpus_usable"] <= point["cpus"]


TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int, ppid: int, ticks: tuple[int, int, int, int], flags: int = 0,
          core: int = 0) -> str:  # fmt: skip
    """A /proc/PID/stat line: utime, stime, cutime, cstime at fields 14-17, flags at 9, the
    core it last ran on at 39; a name with spaces and a parenthesis, as a command's can be."""
    fields = ["S", ppid, 0, 0, 0, 0, flags, 0, 0, 0, 0, *ticks, 20, 0, 1, 0, 0, 0, 0]
    fields += [0] * (36 - len(fields)) + [core, 0, 0]
    return f"{pid} (a (b) c) " + " ".join(map(str, fields))


def test_cpu_seconds_tell_the_cores_the_process_tree_and_the_kernel_apart(tmp_path):
    """A made-up /proc whose answer is known: cores 0 and 1 (not 2) were busy 930 + 313
    ticks (user, nice, system, irq, softirq, steal; not idle, I/O wait); this process and its
    child and grandchild (one reaped into cutime) 200; a kernel thread on core 1 50, one on
    core 2 not counted; an outside process not counted in either."""
    me, child, grandchild = os.getpid(), 10_000_001, 10_000_002
    (tmp_path / "stat").write_text(
        "cpu  9 9 9 9 9 9 9 9 0 0\n"
        "cpu0 400 100 200 7000 50 60 70 100 0 0\n"
        "cpu1 200 0 50 8000 5 6 7 50 0 0\n"
        "cpu2 999 999 999 0 0 0 0 999 0 0\nintr 1 2 3\n"
    )
    processes = {
        me: _stat(me, 1, (10, 5, 40, 5)),
        child: _stat(child, me, (60, 20, 0, 0)),
        grandchild: _stat(grandchild, child, (50, 10, 0, 0)),
        20: _stat(20, 2, (30, 20, 0, 0), flags=0x00208040, core=1),  # a kernel thread
        21: _stat(21, 2, (500, 500, 0, 0), flags=0x00208040, core=2),
        30: _stat(30, 1, (700, 0, 0, 0)),  # another program
    }
    for pid, line in processes.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(line)
    seconds = conditions.cpu_seconds({0, 1}, proc=tmp_path)
    assert seconds is not None
    assert seconds["cores_busy_s"] == pytest.approx(1_243 / TICK)
    assert seconds["own_s"] == pytest.approx(200 / TICK)
    assert seconds["kernel_s"] == pytest.approx(50 / TICK)


def test_a_program_outside_the_run_is_other_work_and_a_child_is_the_run_s_own():
    """Real processes, 2 s: a busy loop reparented away from this process (other work) and a
    busy loop this process started (its own). What each burnt, from its own /proc/PID/stat,
    lands in the right share (another test worker may add to the other work)."""
    loop = "import time\nend = time.time() + 2.5\nwhile time.time() < end: pass"
    spin = [sys.executable, "-c", loop]
    outside = subprocess.run(  # the shell ends at once: its busy loop is no child of ours
        ["sh", "-c", f"{shlex.join(spin)} >/dev/null 2>&1 & echo $!"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    hog = int(outside.stdout)
    cores = os.sched_getaffinity(0)
    first = conditions.cpu_seconds(cores)
    burnt_before = _burnt(hog)
    child = subprocess.Popen(spin)
    time.sleep(2)
    last, burnt = conditions.cpu_seconds(cores), _burnt(hog) - burnt_before
    child.kill()
    child.wait()
    assert first is not None and last is not None
    own = last["own_s"] - first["own_s"]
    other = (
        last["cores_busy_s"] - first["cores_busy_s"] - own - (last["kernel_s"] - first["kernel_s"])
    )
    assert burnt > 0.3, "the outside loop ran"
    assert own > 0.3, "the child's loop is the run's own"
    assert other >= 0.8 * burnt, (other, burnt)
    run = {"start": {"cpus_usable": len(cores), "cpu_s": first},
           "end": {"cpus_usable": len(cores), "cpu_s": last}}  # fmt: skip
    work = host_work([{"conditions": [run]}])
    assert work is not None and work.other and work.busy, work


def _burnt(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK
