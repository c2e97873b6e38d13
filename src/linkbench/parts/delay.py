"""Known delays injected on purpose, where the measurement is taken (``debug.step_delay_ms``,
``debug.comm_delay_ms``), so that a comparison or a probe has an answer to be checked against.

- On a GPU a delay is a spin kernel (``torch.cuda._sleep``, which counts SM clock cycles) on
  a stream: ``step_delay_ms`` on the step's own stream, so the GPU's queue cannot hide it as
  it hides a host sleep; ``comm_delay_ms`` on a stream of its own that each gradient bucket's
  collective waits for (:class:`CommDelay`), so the delay stands in for a slow link: the
  backward pass goes on meanwhile, and only what it does not hide is exposed. The cycles per
  millisecond are calibrated once per process with CUDA events (:func:`cycles_per_ms`), then
  again at every logging step from events around the spins themselves (:class:`Spin`), so
  the delay follows the SM clock of the training load.
- On CPU the step delay is a host sleep inside the step (a CPU step is the host's work), and
  the communication delay a host sleep in a thread that then issues the bucket's collective,
  so the backward pass goes on meanwhile there too.

Each communication delay runs inside a profiler range named :data:`COMM_DELAY_RANGE`, which
:mod:`linkbench.analysis.trace` counts as communication.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch

from linkbench.files import COMM_DELAY_RANGE

# The spin kernel's calibration: each timed spin lasts about this long, this many times.
CALIBRATION_MS = 5.0
CALIBRATION_ROUNDS = 5
FIRST_GUESS_CYCLES = 1_000_000
# Spins timed between two recalibrations (the rest run untimed).
MAX_TIMED_SPINS = 64


def _spin_ms(cycles: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


@functools.cache
def cycles_per_ms(device_index: int) -> float:
    """SM clock cycles the spin kernel counts per millisecond on this GPU (median of a few
    timed spins, after spins that size the probe and bring the clocks up)."""
    with torch.cuda.device(device_index):
        cycles = FIRST_GUESS_CYCLES
        for _ in range(3):
            cycles = max(1, int(cycles * CALIBRATION_MS / max(_spin_ms(cycles), 1e-3)))
        return statistics.median(cycles / _spin_ms(cycles) for _ in range(CALIBRATION_ROUNDS))


def spin_cycles(ms: float, device: torch.device) -> int:
    """The spin kernel's cycles for ``ms`` milliseconds on ``device``."""
    return round(ms * cycles_per_ms(device.index or 0))


class Spin:
    """A spin kernel of ``ms`` milliseconds on the current stream, timed by CUDA events so
    that :meth:`recalibrate` can follow the SM clock: the clock under a training load is not
    the one of the first calibration (on an H200 a first calibration on a cold GPU made a
    2 ms delay read 1.74 ms in training)."""

    def __init__(self, ms: float, device: torch.device) -> None:
        self.ms = ms
        self.cycles = spin_cycles(ms, device)
        self._marks: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def __call__(self) -> None:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(self.cycles)
        end.record()
        if len(self._marks) < MAX_TIMED_SPINS:
            self._marks.append((start, end))

    def recalibrate(self) -> None:
        """Rescale the cycles from the spins since the last call that have run (call it where
        the host waits for the device anyway: the logging steps)."""
        times = [a.elapsed_time(b) for a, b in self._marks if b.query()]
        self._marks.clear()
        if times and (measured := statistics.median(times)) > 0:
            self.cycles = max(1, round(self.cycles * self.ms / measured))


class StepDelay:
    """``debug.step_delay_ms`` in every training step: on the step's stream (GPU) or the host."""

    def __init__(self, ms: float, device: torch.device) -> None:
        self.ms = ms
        self._spin = Spin(ms, device) if device.type == "cuda" and ms > 0 else None

    def __call__(self) -> None:
        if self._spin is not None:
            self._spin()
        elif self.ms:
            time.sleep(self.ms / 1e3)

    def recalibrate(self) -> None:
        if self._spin is not None:
            self._spin.recalibrate()


Hook = Callable[[Any, Any], torch.futures.Future]


class CommDelay:
    """``debug.comm_delay_ms`` before each gradient bucket's collective, as a DDP comm hook
    around the configured one. ``buckets`` counts the delayed buckets."""

    def __init__(self, ms: float, device: torch.device) -> None:
        self.ms = ms
        self.device = device
        self.buckets = 0
        if device.type == "cuda":
            self._stream = torch.cuda.Stream(device)
            self._spin = Spin(ms, device)
        else:
            # One thread: the delays follow each other, as messages on one link do.
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="comm_delay")

    def wrap(self, hook: Hook) -> Hook:
        """``hook`` with the delay in front of it."""
        run = self._on_gpu if self.device.type == "cuda" else self._on_host

        # No annotations: DDP checks them against its own types.
        def delayed(state, bucket):  # type: ignore[no-untyped-def]
            self.buckets += 1
            return run(hook, state, bucket)

        delayed.__qualname__ = f"comm_delay({getattr(hook, '__qualname__', 'hook')})"
        return delayed

    def _on_gpu(self, hook: Hook, state: Any, bucket: Any) -> torch.futures.Future:
        # The bucket's gradients are ready on the current stream; the collective, issued on
        # the delay stream, waits for the spin there, and the backward pass goes on.
        self._stream.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(self._stream):
            with torch.profiler.record_function(COMM_DELAY_RANGE):
                self._spin()
            return hook(state, bucket)

    def _on_host(self, hook: Hook, state: Any, bucket: Any) -> torch.futures.Future:
        done: torch.futures.Future = torch.futures.Future()

        def finish(inner: torch.futures.Future) -> None:
            try:
                done.set_result(inner.value())
            except Exception as error:
                done.set_exception(error)

        def later() -> None:
            try:
                with torch.profiler.record_function(COMM_DELAY_RANGE):
                    time.sleep(self.ms / 1e3)
                hook(state, bucket).add_done_callback(finish)
            except Exception as error:
                done.set_exception(error)

        self._thread.submit(later)
        return done

    def recalibrate(self) -> None:
        if self.device.type == "cuda":
            self._spin.recalibrate()
