"""How a sweep ends when not every job completed, and the command that finishes it.

- **Jobs failed**: the sweep ran on without them (every other job, every round the design
  needed); at its end the summary is printed and written as always, then one line names the
  failed jobs and the command that reruns them (``resume=true`` skips the completed ones),
  and the process exits with status 1.
- **The disk filled up**: no further job starts (it would fail the same way); the summary of
  what was kept is printed (and written where it still fits), then one sentence names the
  directory, the bytes free and the command that finishes the sweep once there is room;
  exit status 1.

:func:`resume_command` is the sweep's own command line again: every override it ran with,
Hydra's own (``hydra.sweeper.*``, ``hydra.callbacks.*``, the launcher) included, its
``--config-dir`` and ``--config-name``, into the same ``hydra.sweep.dir``, with
``resume=true``. A stopped sweep (:mod:`linkbench.launcher.stopping`) prints the same.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from omegaconf import OmegaConf

from linkbench.config.overrides import override_texts
from linkbench.files import RESULT_FILE, SWEEP_RUN

# Hydra's own overrides that say how this process ran, not what the sweep is.
NOT_REPEATED = ("hydra.mode=", "hydra.sweep.dir=", "resume=")


def resume_command(config: Any) -> str:
    """The command that finishes the sweep ``config`` describes (its multirun config)."""
    hydra = config.hydra
    task = override_texts(hydra.overrides.task)
    own = override_texts(hydra.overrides.hydra)
    kept = [o for o in [*task, *own] if not o.startswith(NOT_REPEATED)]
    options: list[str] = []
    sources = OmegaConf.to_container(hydra.runtime.config_sources, resolve=False) or []
    for source in sources:
        if isinstance(source, dict) and source.get("provider") == "command-line":
            options += ["--config-dir", str(source.get("path", "")).removeprefix("file://")]
    name = hydra.job.get("config_name")
    if name and name != "config":
        options += ["--config-name", str(name)]
    return shlex.join(
        ["python", "run.py", "-m", *options, *kept, f"hydra.sweep.dir={hydra.sweep.dir}",
         "resume=true"]
    )  # fmt: skip


def job_name(job_return: Any) -> str:
    """The directory name of a job Hydra returned."""
    try:
        return Path(str(job_return.hydra_cfg.hydra.runtime.output_dir)).name
    except Exception:  # a launcher that returns no Hydra config
        return " ".join(job_return.overrides or [])


def end_with_failures(config: Any, failed: Sequence[Any]) -> NoReturn:
    """After the summary: name the failed jobs and how to rerun them; exit 1."""
    names = [job_name(r) for r in failed]
    first = str(getattr(failed[0], "_return_value", "") or "").split(": ", 1)[-1]
    print(
        f"{len(names)} job(s) of this sweep failed: {', '.join(names)}; the first: {first} "
        "(each one's error is in the summary above and in its result.json). Rerun them, and "
        f"only them, with: {resume_command(config)}",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(1)


def job_set_up(sweep_dir: Path, error: OSError) -> str | None:
    """The job whose folder Hydra was writing (its ``.hydra`` files, its log) when ``error``
    came: the one its file names, else (a write that names no file) the newest job folder
    with no ``result.json``; None where the write was the sweep's own (``multirun.yaml``)."""
    if error.filename:
        try:
            parts = Path(str(error.filename)).resolve().relative_to(sweep_dir.resolve()).parts
        except ValueError:
            return None
        return parts[0] if len(parts) > 1 else None
    unfinished = [
        p
        for p in sweep_dir.iterdir()
        if p.is_dir() and not p.name.startswith((".", SWEEP_RUN)) and not (p / RESULT_FILE).exists()
    ]  # not the sweep's own folders: its TensorBoard runs, its compile cache
    return max(unfinished, key=lambda p: p.stat().st_mtime_ns).name if unfinished else None


def end_on_full_disk(
    config: Any, where: str | None, kept: int, *, setting_up: bool = False
) -> NoReturn:
    """After the summary of what was kept: the full directory, the job it filled under
    (``where``: one that ran, or with ``setting_up`` one Hydra was setting up, whose half-
    written folder is gone), its bytes free, and how to finish the sweep; exit 1."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    free = shutil.disk_usage(sweep_dir).free if sweep_dir.exists() else 0
    job = ""
    if where:
        job = f" while job {where} " + ("was set up (its folder removed)" if setting_up else "ran")
    print(
        f"{sweep_dir} filled up{job} ({free:,} bytes free), so no further job started; "
        f"{kept} job(s) completed and kept. Free space there and finish the sweep with: "
        f"{resume_command(config)}",
        file=sys.stderr,
        flush=True,
    )
    raise SystemExit(1)
