"""Timing windows of training steps without synchronising the host inside a window.

On GPU the window's ends are CUDA events recorded in stream order; the host waits only when
a window closes. On CPU every operation (gloo collectives included) has finished when the
step returns, so a monotonic clock is exact. A window holds the steps and nothing else:
whatever the host does between windows (logging, checkpoints) happens after ``stop()`` and
before the next ``start()``.
"""

from __future__ import annotations

import time

import torch


class WindowTimer:
    """``start()`` opens a window; ``stop()`` closes it and returns its milliseconds."""

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

    def stop(self) -> float:
        if self._cuda:
            assert self._start_event is not None, "stop() before start()"
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return self._start_event.elapsed_time(end)
        return (time.perf_counter() - self._start_s) * 1e3
