"""TensorBoard as a reviewer meets it: its own server on a logdir (the default loader, as
``tensorboard --logdir`` starts it), its HTTP API, and a real browser on its dashboards:
Debian's ``chromium`` driven by ``playwright`` (never a downloaded browser). ``.ci/run``
installs both; without them a browser test is skipped with the one line of
:func:`browser_missing`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from .conftest import REPO

CHROMIUM = os.environ.get("LINKBENCH_CHROMIUM", "/usr/bin/chromium")
ARTIFACTS = Path(os.environ.get("LINKBENCH_ARTIFACTS", REPO / "artifacts"))
"""Where browser tests keep their screenshots (docs/screenshots.py copies them into docs/)."""
STATUSES = ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"]
T = TypeVar("T")


def browser_missing() -> str | None:
    """Why no browser test can run here (one line), or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "no browser test: playwright is not installed (pip install playwright; .ci/run does)"
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        return f"no browser test: no {CHROMIUM} (apt-get install chromium; .ci/run does)"
    return None


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 90) -> T:
    """``probe()`` once it gives something (its errors count as not yet), or fail saying
    ``what`` never came."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if (found := probe()) is not None:
                return found
        except OSError:
            pass
        assert time.monotonic() < deadline, f"TensorBoard never served {what}"
        time.sleep(0.5)


class TensorBoard:
    """A running ``tensorboard --logdir`` and its HTTP API."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def get(self, path: str, **query: str) -> Any:
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        with urllib.request.urlopen(f"{self.url}/{path}{suffix}", timeout=30) as response:
            return json.loads(response.read())

    def post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            f"{self.url}/{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def experiment(self) -> dict[str, Any]:
        """The HParams experiment as the dashboard asks for it."""
        return self.post("data/plugin/hparams/experiment",
                         {"experimentName": "", "hparamsLimit": 1000})  # fmt: skip

    def groups(self) -> list[dict[str, Any]]:
        """The HParams rows, as the dashboard first asks for them (no sorting)."""
        found = self.post(
            "data/plugin/hparams/session_groups",
            {"experimentName": "", "allowedStatuses": STATUSES, "startIndex": 0,
             "sliceSize": 1000, "aggregationType": "AGGREGATION_AVG"},
        )  # fmt: skip
        return found.get("sessionGroups", [])

    def scalars(self, run: str, tag: str) -> list[float]:
        """Every value of a run's scalar series."""
        rows = self.get("data/plugin/scalars/scalars", run=run, tag=tag)
        return [value for _, _, value in rows]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def tensorboard(logdir: Path, ready: Callable[[TensorBoard], bool]) -> Iterator[TensorBoard]:
    """TensorBoard on ``logdir`` as a user starts it, once ``ready(board)`` holds."""
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--port", str(port),
         "--host", "127.0.0.1", "--reload_interval", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        board = TensorBoard(port)
        wait_for(f"the data of {logdir}", lambda: True if ready(board) else None)
        yield board
    finally:
        server.kill()
        server.wait()
