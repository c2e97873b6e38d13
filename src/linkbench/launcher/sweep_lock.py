"""A sweep folder belongs to one sweep at a time, and ``resume=true`` continues only the sweep
that folder holds.

Two sweeps given one ``hydra.sweep.dir`` would run the same job in the same folder at the
same moment and measure each other; the second is refused while the first runs. The lock is
the kernel's (``flock`` on the folder's :data:`LOCK_FILE`): it goes with the process that
holds it however that ends, so a killed sweep leaves no stale lock, only the file, which the
next sweep takes. The file says who holds it (pid, host, start, command), for the refusal.

A resumed sweep's overrides must be the ones its folder's ``multirun.yaml`` recorded
(``resume`` aside, order aside): resumed into another sweep's folder, its jobs would run
beside that sweep's and the summary would mix them."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from linkbench.errors import ConfigError
from linkbench.files import MULTIRUN_FILE

LOCK_FILE = ".linkbench-sweep.lock"
NOT_COMPARED = ("resume=", "+resume=", "++resume=")

_held: dict[Path, int] = {}  # folder -> the open, locked file; released when the process ends


def hold(sweep_dir: Path) -> None:
    """Take ``sweep_dir``'s lock for the rest of this process (the sweep and its summary),
    or raise ConfigError naming the sweep that holds it. ``sweep_dir`` exists."""
    key = sweep_dir.resolve()
    if key in _held:
        return
    fd = os.open(key / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise ConfigError(
            f"hydra.sweep.dir={sweep_dir} is in use by another sweep{holder}; wait for it to "
            "end, or give this sweep a folder of its own (hydra.sweep.dir=...)."
        ) from None
    os.ftruncate(fd, 0)
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": shlex.join(sys.argv),
    }
    os.write(fd, json.dumps(record).encode())
    _held[key] = fd


def _holder(fd: int) -> str:
    """ " (pid N on HOST since T: COMMAND)" from a held lock file, or "" where unreadable."""
    try:
        record = json.loads(os.pread(fd, 65536, 0) or b"{}")
        return (
            f" (pid {record['pid']} on {record['host']} since {record['started']}: "
            f"{record['command']})"
        )
    except (OSError, ValueError, KeyError, TypeError):
        return ""


def check_resumed(sweep_dir: Path, config: Any) -> None:
    """With ``resume=true``: refuse a folder whose recorded sweep has other overrides, or
    another primary config, than this one, naming what differs."""
    recorded_file = sweep_dir / MULTIRUN_FILE
    if not config.get("resume", False) or not recorded_file.is_file():
        return
    try:
        recorded = OmegaConf.load(recorded_file)
        before = _overrides(recorded)
        name_before = recorded.hydra.job.get("config_name")
    except Exception:  # not a multirun.yaml Hydra wrote: nothing to compare against
        return
    now, name_now = _overrides(config), config.hydra.job.get("config_name")
    differs = []
    if name_before != name_now:
        differs.append(f"config {name_before} there, {name_now} here")
    gone = sorted((before - now).elements())
    new = sorted((now - before).elements())
    if gone:
        differs.append(f"it ran {' '.join(gone)}")
    if new:
        differs.append(f"this sweep adds {' '.join(new)}")
    if differs:
        raise ConfigError(
            f"resume=true: hydra.sweep.dir={sweep_dir} holds another sweep ("
            + "; ".join(differs)
            + "); resume it with the overrides it ran (its multirun.yaml's "
            "hydra.overrides.task), or give this sweep a folder of its own."
        )


def _overrides(config: Any) -> Counter[str]:
    """A sweep's task overrides as typed, ``resume`` left out, as a multiset."""
    texts = OmegaConf.to_container(config.hydra.overrides.task, resolve=False) or []
    return Counter(str(t) for t in texts if not str(t).startswith(NOT_COMPARED))
