"""How a model is spread over the ranks: DDP, FSDP2, or ZeRO-1 over DDP (``strategy/``).

- ``ddp``: every rank holds the whole model; gradients are all-reduced per bucket during
  the backward pass (:mod:`linkbench.parts.ddp`).
- ``fsdp``: PyTorch's FSDP2 ``fully_shard``, per block and then the root: parameters are
  sharded and all-gathered before each block's forward and backward, gradients are
  reduce-scattered. A block is each element of a ``Sequential``/``ModuleList`` of two or
  more modules of one class (transformer blocks, ResNet bottlenecks), unless
  ``strategy.shard_classes`` names the classes.
- ``zero1``: DDP, with the optimizer state sharded by ``ZeroRedundancyOptimizer``: each rank
  updates its share of the parameters and broadcasts them.

Each gives the module the step calls, a context for a step without its gradient
collectives (the exposed-communication probe), the bytes its collectives move per step, and
the model's and optimizer's state for checkpoints.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from linkbench.config.schema import Config, StrategyName
from linkbench.parts import ddp
from linkbench.parts.delay import CommDelay


def blocks(model: nn.Module, classes: list[str]) -> list[nn.Module]:
    """The modules FSDP shards one by one, outermost first: those of ``classes``, or else the
    members of every ``Sequential``/``ModuleList`` whose parameterised members are two or more
    of one class (not looking inside a block once found)."""
    if classes:
        return [m for m in model.modules() if type(m).__name__ in classes and m is not model]
    found: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        members = [c for c in module.children() if any(True for _ in c.parameters())]
        container = isinstance(module, (nn.Sequential, nn.ModuleList))
        if container and len(members) >= 2 and len({type(c) for c in members}) == 1:
            found.extend(members)
            return
        for child in module.children():
            visit(child)

    visit(model)
    return found


def tensor_bytes(tensors: Iterator[torch.Tensor], dtype: torch.dtype | None = None) -> int:
    """Bytes of the tensors' whole (unsharded) values, in ``dtype`` when given."""
    total = 0
    for t in tensors:
        size = dtype.itemsize if dtype is not None else t.element_size()
        total += t.numel() * size
    return total


class Parallel:
    """A model under one strategy: what a step calls and what its collectives move.

    ``module`` is the plain model (parameters and state, without a wrapper's prefixes);
    ``model`` is what a training step calls."""

    kind: StrategyName
    module: nn.Module
    model: nn.Module

    def without_gradient_sync(
        self, optimizer: torch.optim.Optimizer | None = None
    ) -> contextlib.AbstractContextManager:
        """A step without the strategy's collectives (the probe's compute-only step); the
        ``optimizer`` is the one the step will call."""
        raise NotImplementedError

    def comm_bytes(self, config: Config) -> dict[str, float]:
        """Bytes per step each collective moves: the whole tensors' sizes, before the ring's
        2(n-1)/n or (n-1)/n (nccl-tests' busbw factors apply to these)."""
        raise NotImplementedError

    def message_bytes(self, config: Config, op: str) -> float:
        """The size of one message of ``op`` (a bucket, a unit's parameters)."""
        raise NotImplementedError

    def messages(self, config: Config) -> list[dict[str, float | str]]:
        """Per collective: its message size and how many messages a step sends."""
        out: list[dict[str, float | str]] = []
        for op, total in self.comm_bytes(config).items():
            size = min(total, self.message_bytes(config, op))
            out.append({"op": op, "bytes": size, "count": total / size if size else 0.0})
        return out


class DataParallel(Parallel):
    """DDP (``strategy=ddp``, and under ZeRO-1)."""

    kind = StrategyName.ddp

    def __init__(self, model: nn.Module, config: Config, device: torch.device) -> None:
        delay_ms = config.debug.comm_delay_ms
        self.comm_delay = CommDelay(delay_ms, device) if delay_ms > 0 else None
        self.ddp = ddp.wrap(
            model, config.ddp, config.comm_hook, device, config.nvtx, self.comm_delay
        )
        self.module, self.model = model, self.ddp

    def without_gradient_sync(
        self, optimizer: torch.optim.Optimizer | None = None
    ) -> contextlib.AbstractContextManager:
        return self.ddp.no_sync()

    def message_bytes(self, config: Config, op: str) -> float:
        if op == "all_reduce":  # DDP's buckets (its first is smaller; not modelled)
            return config.ddp.bucket_cap_mb * 2**20 * (config.comm_hook.wire_factor or 1.0)
        return self.comm_bytes(config)[op] / dist.get_world_size()  # each rank's shard

    def comm_bytes(self, config: Config) -> dict[str, float]:
        wire = config.comm_hook.wire_factor
        grads = tensor_bytes(p for p in self.module.parameters() if p.requires_grad)
        return {} if wire is None else {"all_reduce": grads * wire}


class ZeroOne(DataParallel):
    """DDP with ZeroRedundancyOptimizer: gradients all-reduced, updated shards broadcast."""

    kind = StrategyName.zero1

    def comm_bytes(self, config: Config) -> dict[str, float]:
        params = tensor_bytes(p for p in self.module.parameters() if p.requires_grad)
        return {**super().comm_bytes(config), "broadcast": float(params)}

    @contextlib.contextmanager
    def without_gradient_sync(
        self, optimizer: torch.optim.Optimizer | None = None
    ) -> Iterator[None]:
        """No all-reduce, and an optimizer step that updates this rank's shard without
        broadcasting it (``ZeroRedundancyOptimizer._local_step``, its step less the
        broadcast): the step's compute alone."""
        saved = optimizer.__dict__.get("step") if optimizer is not None else None
        if optimizer is not None:
            optimizer.step = optimizer._local_step  # type: ignore[attr-defined,method-assign]
        try:
            with self.ddp.no_sync():
                yield
        finally:
            if optimizer is not None:
                if saved is None:  # the class's own step again
                    del optimizer.step
                else:  # the lr scheduler's wrapper of it
                    optimizer.step = saved  # type: ignore[method-assign]


class FullyShardedParallel(Parallel):
    """FSDP2 ``fully_shard`` per block, then the root."""

    kind = StrategyName.fsdp

    def __init__(self, model: nn.Module, config: Config, device: torch.device) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        s = config.strategy
        self._param_dtype = getattr(torch, str(s.param_dtype)) if s.param_dtype else None
        self._reduce_dtype = getattr(torch, str(s.reduce_dtype)) if s.reduce_dtype else None
        self._sizes = {
            "params": tensor_bytes(model.parameters(), self._param_dtype),
            "grads": tensor_bytes(
                (p for p in model.parameters() if p.requires_grad),
                self._reduce_dtype or self._param_dtype,
            ),
        }
        shard: dict[str, Any] = {
            "mesh": init_device_mesh(device.type, (dist.get_world_size(),)),
            "reshard_after_forward": s.reshard_after_forward,
            "mp_policy": MixedPrecisionPolicy(self._param_dtype, self._reduce_dtype),
        }
        self.blocks = blocks(model, list(s.shard_classes))
        for block in self.blocks:
            fully_shard(block, **shard)
        fully_shard(model, **shard)
        self._reshard_after_forward = s.reshard_after_forward
        self.module = self.model = model

    def _sharded(self) -> list[Any]:
        return [m for m in (*self.blocks, self.module) if hasattr(m, "set_requires_gradient_sync")]

    @contextlib.contextmanager
    def without_gradient_sync(
        self, optimizer: torch.optim.Optimizer | None = None
    ) -> Iterator[None]:
        """No reduce-scatter, and parameters kept unsharded from the first step on, so the
        steps after it run without collectives: FSDP's compute-only step."""
        for module in self._sharded():
            module.set_requires_gradient_sync(False, recurse=False)
            module.set_reshard_after_backward(False, recurse=False)
            module.set_reshard_after_forward(False, recurse=False)
        try:
            yield
        finally:
            for module in self._sharded():
                module.set_requires_gradient_sync(True, recurse=False)
                module.set_reshard_after_backward(True, recurse=False)
                module.set_reshard_after_forward(self._reshard_after_forward, recurse=False)

    def message_bytes(self, config: Config, op: str) -> float:
        units = len(self.blocks) + 1  # the blocks, and the root
        key = "params" if op == "all_gather" else "grads"
        return self._sizes[key] / units

    def comm_bytes(self, config: Config) -> dict[str, float]:
        # Forward all-gathers every block; backward all-gathers it again when the forward
        # resharded it; gradients are reduce-scattered once.
        gathers = 2 if self._reshard_after_forward else 1
        return {
            "all_gather": float(self._sizes["params"] * gathers),
            "reduce_scatter": float(self._sizes["grads"]),
        }


def parallelize(model: nn.Module, config: Config, device: torch.device) -> Parallel:
    """The model under ``config.strategy``."""
    if config.strategy.name == StrategyName.fsdp:
        return FullyShardedParallel(model, config, device)
    if config.strategy.name == StrategyName.zero1:
        return ZeroOne(model, config, device)
    return DataParallel(model, config, device)
