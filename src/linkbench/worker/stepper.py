"""How a training step executes: eagerly, under torch.compile, or replayed as one CUDA graph.

:class:`Stepper` spreads the model over the ranks (:mod:`linkbench.parts.strategy`: DDP,
FSDP2, ZeRO-1 or one from outside, which also builds the optimizer) and owns the optimizer,
learning-rate schedule and loss scaler.
``synced()`` runs one training step (forward, backward with the gradient collectives,
optimizer, schedule) and returns the loss as a device tensor, never reading it on the host;
``unsynced()`` runs the same step without the gradient collectives (DDP's ``no_sync()``;
FSDP's compute-only step) for the communication probe (:mod:`linkbench.worker.probe`).

``compile=true`` runs the wrapped model under ``torch.compile`` (with DDP, Dynamo splits the
graph at the bucket boundaries so the all-reduces still overlap the backward pass). Compilation
happens in the first steps, which :mod:`linkbench.config.schema` keeps inside the untimed steps.

``cuda_graphs=true`` follows PyTorch's recipe for capturing a whole network with DDP (CUDA
semantics notes, "Usage with DistributedDataParallel"): DDP is constructed, and its first
11 steps run eagerly, on a side stream; the next step (forward, backward with its
all-reduces, optimizer) is captured into one graph that every later step replays. Each
batch is copied into the captured input tensors (synthetic data already is them), the
learning rate is a device tensor the schedule fills between replays, and autocast's weight
cache is off, as capture requires. The probe's no_sync step gets a graph of its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from linkbench.config.choices import CUDA_GRAPH_EAGER_STEPS
from linkbench.config.plan import JobPlan
from linkbench.parts import precision
from linkbench.parts.data import Batch
from linkbench.parts.delay import StepDelay
from linkbench.parts.models import loss_function
from linkbench.parts.optim import build_schedule
from linkbench.parts.strategy import parallelize

# Eager no_sync steps before the probe's no_sync graph is captured (they run untimed).
UNSYNCED_EAGER_STEPS = 3


class Stepper:
    """One rank's training step over ``batches``, in the execution mode the job asks for."""

    def __init__(
        self, plan: JobPlan, model: nn.Module, batches: Iterator[Batch], device: torch.device
    ) -> None:
        cfg = plan.config
        self._precision = cfg.precision
        self._device = device
        self._batches = batches
        self._loss = loss_function(cfg.model)
        self._delay = StepDelay(cfg.debug.step_delay_ms, device)
        self.cuda_graphs = cfg.cuda_graphs
        self._side = torch.cuda.Stream(device) if self.cuda_graphs else None
        self._nvtx = cfg.nvtx
        with self._on_side():
            self.parallel = parallelize(plan.runtime, model, cfg, device)
        if self._side is not None:
            torch.cuda.current_stream(device).wait_stream(self._side)
        self._forward: Callable[..., torch.Tensor] = self.parallel.model
        if cfg.compile:
            self._forward = torch.compile(self.parallel.model, mode=cfg.compile_mode)
        self.scaler = precision.grad_scaler(self._precision, device)
        self.optimizer = self.parallel.build_optimizer(
            cfg, plan.lr, device, grad_scaler=self.scaler.is_enabled(), capturable=self.cuda_graphs
        )
        self.schedule = build_schedule(self.optimizer, plan.schedule)
        self._eager_synced_steps = 0
        # Per kind of step (synced or not): the graph, its loss and its input tensors.
        self._graphs: dict[bool, tuple[torch.cuda.CUDAGraph, torch.Tensor, Batch]] = {}

    def recalibrate_delays(self) -> None:
        """Let the injected delays follow the clock (at logging steps, where the host waits)."""
        self._delay.recalibrate()
        if self.parallel.comm_delay is not None:
            self.parallel.comm_delay.recalibrate()

    def synced(self) -> torch.Tensor:
        """One training step with gradient all-reduce; its loss as a device tensor."""
        return self._step(sync=True)

    def unsynced(self) -> torch.Tensor:
        """The same step without the all-reduce (ranks' weights drift apart)."""
        return self._step(sync=False)

    def _step(self, sync: bool) -> torch.Tensor:
        self._delay()  # debug.step_delay_ms: a known effect, for calibration
        batch = next(self._batches)
        if self.cuda_graphs:
            loss = self._graph_step(batch, sync)
        else:
            with self._sync_context(sync):
                loss = self._eager(batch)
        self.schedule.step()
        return loss

    def _eager(self, batch: Batch, zero_grad: bool = True) -> torch.Tensor:
        inputs, targets = batch
        autocast = precision.autocast(self._precision, self._device, cache=not self.cuda_graphs)
        with self._phase("forward"), autocast:
            loss = self._loss(self._forward(inputs), targets)
        with self._phase("backward"):
            self.scaler.scale(loss).backward()
        with self._phase("optimizer"):
            self.scaler.step(self.optimizer)
            self.scaler.update()
            if zero_grad:
                self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def _phase(self, name: str) -> contextlib.AbstractContextManager:
        """An NVTX range named after the phase, with ``nvtx=true``."""
        return torch.cuda.nvtx.range(name) if self._nvtx else contextlib.nullcontext()

    def _graph_step(self, batch: Batch, sync: bool) -> torch.Tensor:
        if sync not in self._graphs:
            if sync and self._eager_synced_steps < CUDA_GRAPH_EAGER_STEPS:
                self._eager_synced_steps += 1
                return self._eager_on_side(batch, sync)
            for _ in range(0 if sync else UNSYNCED_EAGER_STEPS):
                self._eager_on_side(batch, sync)
            self._graphs[sync] = self._capture(batch, sync)
        graph, loss, (inputs, targets) = self._graphs[sync]
        if batch[0] is not inputs:
            inputs.copy_(batch[0], non_blocking=True)
            targets.copy_(batch[1], non_blocking=True)
        graph.replay()
        return loss

    def _eager_on_side(self, batch: Batch, sync: bool) -> torch.Tensor:
        assert self._side is not None
        current = torch.cuda.current_stream(self._device)
        self._side.wait_stream(current)
        with torch.cuda.stream(self._side), self._sync_context(sync):
            loss = self._eager(batch)
        current.wait_stream(self._side)
        return loss

    def _capture(
        self, batch: Batch, sync: bool
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, Batch]:
        graph = torch.cuda.CUDAGraph()
        # backward() then allocates the gradients from the graph's private memory pool, and
        # every replay writes them afresh instead of accumulating.
        self.optimizer.zero_grad(set_to_none=True)
        # thread_local: NCCL's watchdog thread may query events while this thread captures.
        capture = torch.cuda.graph(graph, stream=self._side, capture_error_mode="thread_local")
        with self._sync_context(sync), capture:
            loss = self._eager(batch, zero_grad=False)
        return graph, loss, batch

    def _sync_context(self, sync: bool) -> contextlib.AbstractContextManager:
        return (
            contextlib.nullcontext()
            if sync
            else self.parallel.without_gradient_sync(self.optimizer)
        )

    def _on_side(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext() if self._side is None else torch.cuda.stream(self._side)
