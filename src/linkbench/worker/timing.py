"""Timing windows of training steps without synchronising the host inside a window.

On GPU the window's ends are CUDA events recorded in stream order; the host waits only when
a window closes. On CPU every operation (gloo collectives included) has finished when the
step returns, so a monotonic clock is exact.
"""

from __future__ import annotations

import time

import torch


class WindowTimer:
    """``start()`` opens a window; ``lap()`` closes it, returns its milliseconds, opens the next."""

    def __init__(self, device: torch.device) -> None:
        self._cuda = device.type == "cuda"
        self._start_event: torch.cuda.Event | None = None
        self._start_s = 0.0

    def _mark(self) -> None:
        if self._cuda:
            self._start_event = torch.cuda.Event(enable_timing=True)
            self._start_event.record()
        else:
            self._start_s = time.perf_counter()

    def start(self) -> None:
        self._mark()

    def lap(self) -> float:
        if self._cuda:
            assert self._start_event is not None, "lap() before start()"
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            elapsed_ms = self._start_event.elapsed_time(end)
            self._start_event = end
            return elapsed_ms
        now = time.perf_counter()
        elapsed_ms = (now - self._start_s) * 1e3
        self._start_s = now
        return elapsed_ms
