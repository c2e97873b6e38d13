"""What a run of an emulated link recorded that it made: its namespaces and its processes.

A name that looks like linkbench's is no proof that linkbench made it, and a lock file is no
proof that its maker is gone (anyone may delete one). So before it makes anything, a run's
launcher writes ``/run/linkbench/<token>.json``: the token, the host's boot id, the
launcher's pid and start time (field 22 of ``/proc/<pid>/stat``) and pid namespace, and the
names of the namespaces it is about to make; each namespace's identity (the inode of its
nsfs file) is added as soon as it is made. Each worker, before it enters its node's
namespace, writes ``/run/linkbench/<token>.pid<N>.json`` with its own pid and start time.

The launcher is alive while a process of its pid with its start time runs on the same boot;
the kernel says so, not a file. Only a record whose launcher is gone is swept, and only
what it names: namespaces whose inode is still the recorded one, processes whose pid and
start time are a recorded worker's (or that descend from one). Records are read only with
the token's format (8 hex digits), names of that token, and an owner of root or this user.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Every namespace linkbench makes is named PREFIX-<token>-<role>; the token is one run's.
PREFIX = "linkbench"
NETNS_DIR = "/run/netns"  # where iproute2 keeps named namespaces
RECORD_DIR = Path("/run/linkbench")
RECORD_FORMAT = 1
TOKEN = re.compile(r"[0-9a-f]{8}")
NETWORK_RECORD = re.compile(r"(?P<token>[0-9a-f]{8})\.json")
PROCESS_RECORD = re.compile(r"(?P<token>[0-9a-f]{8})\.pid(?P<pid>[0-9]+)\.json")
ROLE = re.compile(r"switch|node(0|[1-9][0-9]*)")


def namespace(token: str, role: str) -> str:
    """The name of one of a run's namespaces (``role``: ``switch`` or ``node<N>``)."""
    return f"{PREFIX}-{token}-{role}"


class RecordError(OSError):
    """A record could not be written; the message is the file and the reason."""


def boot_id() -> str:
    """This boot of the host (a pid and its start time mean a process only within one)."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state first); None: gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot; None if none runs (a zombie
    has ended)."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return None
    return int(fields[19])  # field 22 of the whole line


def parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[1])


def pid_namespace() -> str:
    return os.readlink("/proc/self/ns/pid")


@dataclass(frozen=True)
class Process:
    """One process, named so that a later process with the same pid is not taken for it."""

    pid: int
    start_time: int

    @classmethod
    def me(cls) -> Process:
        started = start_time(os.getpid())
        assert started is not None  # this process runs
        return cls(os.getpid(), started)

    def alive(self) -> bool:
        return start_time(self.pid) == self.start_time

    def kill(self) -> bool:
        """SIGKILL this process if it is still this one; whether it was sent. The pidfd is
        taken before the start time is checked, so a pid reused in between is not hit."""
        try:
            fd = os.pidfd_open(self.pid)
        except OSError:
            return False
        try:
            if not self.alive():
                return False
            signal.pidfd_send_signal(fd, signal.SIGKILL)
            return True
        except ProcessLookupError:
            return False
        finally:
            os.close(fd)


def network_path(token: str) -> Path:
    return RECORD_DIR / f"{token}.json"


def process_path(token: str, pid: int) -> Path:
    return RECORD_DIR / f"{token}.pid{pid}.json"


def _write(path: Path, record: dict[str, Any], new: bool = False) -> None:
    """Write ``record`` whole or not at all (a temporary file renamed over it; with ``new``,
    linked in place, so an existing record is never replaced)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        RECORD_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp.write_text(json.dumps(record) + "\n")
        if new:
            os.link(tmp, path)
            tmp.unlink()
        else:
            os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)
        raise RecordError(f"{path} ({error.strerror or error})") from None


def namespace_inode(name: str) -> int | None:
    """The identity of namespace ``name`` (its nsfs inode); None if no such name."""
    try:
        return os.stat(f"{NETNS_DIR}/{name}").st_ino
    except OSError:
        return None


@dataclass
class NetworkRecord:
    """A run's record of the namespaces it made (``inode`` None: about to be made)."""

    token: str
    boot_id: str
    launcher: Process
    pid_namespace: str
    namespaces: dict[str, int | None]

    @classmethod
    def planned(cls, token: str, names: Iterable[str]) -> NetworkRecord:
        """This process's record of the namespaces it is about to make."""
        return cls(token, boot_id(), Process.me(), pid_namespace(), dict.fromkeys(names))

    def write(self, new: bool = False) -> None:
        _write(network_path(self.token), self.as_json(), new=new)

    def as_json(self) -> dict[str, Any]:
        return {
            "made_by": "linkbench",
            "format": RECORD_FORMAT,
            "token": self.token,
            "boot_id": self.boot_id,
            "launcher": {"pid": self.launcher.pid, "start_time": self.launcher.start_time},
            "pid_namespace": self.pid_namespace,
            "namespaces": self.namespaces,
        }

    def launcher_state(self) -> str:
        """``alive``, ``gone``, ``other boot`` (what it made cannot exist any more) or
        ``unknown`` (recorded from another pid namespace: its pid means nothing here)."""
        if self.boot_id != boot_id():
            return "other boot"
        if self.pid_namespace != pid_namespace():
            return "unknown"
        return "alive" if self.launcher.alive() else "gone"

    def made(self) -> dict[str, int]:
        """The recorded namespaces that exist now as the ones made (same inode)."""
        return {
            name: inode
            for name, inode in self.namespaces.items()
            if inode is not None and namespace_inode(name) == inode
        }


def _owned(path: Path) -> bool:
    """Whether root or this user owns ``path`` (a record another user wrote is not ours)."""
    try:
        owner = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(owner.st_mode) and owner.st_uid in (0, os.geteuid())


def _read(path: Path) -> dict[str, Any] | None:
    if not _owned(path):
        return None
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def _parse_network(token: str, loaded: dict[str, Any]) -> NetworkRecord | None:
    """The record, if it is one linkbench wrote for ``token`` and names only its namespaces."""
    try:
        if loaded["made_by"] != "linkbench" or loaded["format"] != RECORD_FORMAT:
            return None
        if loaded["token"] != token:
            return None
        names = loaded["namespaces"]
        prefix = namespace(token, "")
        for name, inode in names.items():
            if not name.startswith(prefix) or not ROLE.fullmatch(name[len(prefix) :]):
                return None
            if inode is not None and (not isinstance(inode, int) or isinstance(inode, bool)):
                return None
        launcher = Process(int(loaded["launcher"]["pid"]), int(loaded["launcher"]["start_time"]))
        return NetworkRecord(
            token, str(loaded["boot_id"]), launcher, str(loaded["pid_namespace"]), dict(names)
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def read_network(token: str) -> NetworkRecord | None:
    """Run ``token``'s network record, if it is a well-formed one of root's or this user's."""
    loaded = _read(network_path(token))
    return _parse_network(token, loaded) if loaded is not None else None


def networks() -> list[NetworkRecord]:
    """Every well-formed network record on this host, by token."""
    try:
        entries = sorted(os.listdir(RECORD_DIR))
    except OSError:
        return []
    found = []
    for entry in entries:
        match = NETWORK_RECORD.fullmatch(entry)
        record = read_network(match["token"]) if match is not None else None
        if record is not None:
            found.append(record)
    return found


def record_process(token: str, rank: int) -> None:
    """Record this process as one of run ``token``'s (a worker, before it enters its rank's
    namespace), so that a sweep may stop it once its launcher is gone."""
    if not TOKEN.fullmatch(token):
        raise ValueError(f"not a run's token: {token!r}")
    me = Process.me()
    _write(
        process_path(token, me.pid),
        {"made_by": "linkbench", "token": token, "rank": rank, "pid": me.pid,
         "start_time": me.start_time, "boot_id": boot_id()},
    )  # fmt: skip


def processes(token: str) -> list[Process]:
    """The processes run ``token`` recorded (this boot's, whether or not they still run)."""
    found = []
    try:
        entries = sorted(os.listdir(RECORD_DIR))
    except OSError:
        return []
    here = boot_id()
    for entry in entries:
        match = PROCESS_RECORD.fullmatch(entry)
        if match is None or match["token"] != token:
            continue
        loaded = _read(RECORD_DIR / entry)
        try:
            if loaded is None or loaded["token"] != token or loaded["boot_id"] != here:
                continue
            if int(loaded["pid"]) != int(match["pid"]):
                continue
            found.append(Process(int(loaded["pid"]), int(loaded["start_time"])))
        except (KeyError, TypeError, ValueError):
            continue
    return found


def _process_records() -> Iterator[tuple[re.Match[str], Path]]:
    """(name match, path) of every process record in RECORD_DIR."""
    try:
        entries = os.listdir(RECORD_DIR)
    except OSError:
        return
    for entry in entries:
        if (match := PROCESS_RECORD.fullmatch(entry)) is not None:
            yield match, RECORD_DIR / entry


def forget_strays() -> None:
    """Remove the records of processes that have ended and whose run has no network record
    (a run whose record was deleted while it ran)."""
    for match, path in _process_records():
        if network_path(match["token"]).exists() or not _owned(path):
            continue
        if not any(p.alive() for p in processes(match["token"]) if p.pid == int(match["pid"])):
            path.unlink(missing_ok=True)


def forget(token: str) -> None:
    """Remove run ``token``'s records (its processes' first, its network's last)."""
    for match, path in _process_records():
        if match["token"] == token:
            path.unlink(missing_ok=True)
    network_path(token).unlink(missing_ok=True)
