"""Where a job's code came from: the git commit, whether the tree was dirty, a hash of the diff."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

SOURCE_DIR = Path(__file__).resolve().parent


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state(path: Path = SOURCE_DIR) -> dict[str, Any]:
    """Commit, dirty flag and sha256 of ``git diff HEAD`` for the checkout holding ``path``."""
    commit = _git(["rev-parse", "HEAD"], path)
    if commit is None:
        return {"commit": None, "reason": "not a git checkout (or git is missing)"}
    status = _git(["status", "--porcelain", "--untracked-files=no"], path) or ""
    diff = _git(["diff", "HEAD"], path) or ""
    return {
        "commit": commit.strip(),
        "dirty": bool(status.strip()),
        "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
    }
