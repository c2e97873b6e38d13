"""How a model is spread over the ranks, at run time: one :class:`Parallel` subclass per
strategy, named by its option's ``strategy._target_``. A built-in strategy's option
(:mod:`linkbench.config.strategies`) holds its keys and its capabilities, which the plan
checks; a strategy from outside the package says its capabilities in its class
(``captures_cuda_graphs``, ``scales_gradients``, ``hooks_buckets``: all no unless it says
so), so it is one module and one YAML file.

- ``ddp``: every rank holds the whole model; gradients are all-reduced per bucket during
  the backward pass (:mod:`linkbench.parts.ddp`).
- ``fsdp``: PyTorch's FSDP2 ``fully_shard``, per block and then the root: parameters are
  sharded and all-gathered before each block's forward and backward, gradients are
  reduce-scattered. A block is each element of a ``Sequential``/``ModuleList`` of two or
  more modules of one class (transformer blocks, ResNet bottlenecks), unless
  ``strategy.shard_classes`` names the classes.
- ``zero1``: DDP, with the optimizer state sharded by ``ZeroRedundancyOptimizer``: each rank
  updates its share of the parameters and broadcasts them.

A strategy's class owns everything that differs between them at run time: wrapping the
model, building its optimizer, its model's and optimizer's state as each rank holds it, for
``torch.distributed.checkpoint`` to save and load (``get_state_dict``/``set_state_dict``
unless it says otherwise), the context for a step without its collectives (the
exposed-communication probe), its own communication timings, and the bytes its collectives
move per step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from linkbench.config.runtime import Runtime
from linkbench.config.schema import Config, StrategyConfig
from linkbench.config.strategies import DDPStrategy, FSDPStrategy
from linkbench.config.targets import subclass_named
from linkbench.link.crossing import Call
from linkbench.parts import ddp
from linkbench.parts.delay import CommDelay
from linkbench.parts.optim import optimizer_class

StateDicts = tuple[dict[str, Any], dict[str, Any] | None]


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
    ``model`` is what a training step calls. A subclass is built as
    ``cls(model, config, device)`` on every rank, once the plan checked its option
    (:meth:`linkbench.config.schema.StrategyConfig.check`)."""

    module: nn.Module
    model: nn.Module
    comm_delay: CommDelay | None = None
    """``debug.comm_delay_ms`` in front of each of its collectives, when it supports that."""

    def __init__(self, model: nn.Module, config: Config, device: torch.device) -> None:
        raise NotImplementedError

    def build_optimizer(
        self, config: Config, lr: float, device: torch.device, grad_scaler: bool,
        capturable: bool = False,
    ) -> torch.optim.Optimizer:  # fmt: skip
        """The configured optimizer over the model's parameters at ``lr``, fused on GPU
        where that is safe (:func:`linkbench.parts.optim.optimizer_class`)."""
        cls, kwargs = optimizer_class(
            config.optimizer, lr, config.model.weight_decay, device, grad_scaler, capturable
        )
        return cls(self.model.parameters(), **kwargs)

    def state_dicts(self, optimizer: torch.optim.Optimizer) -> StateDicts:
        """The model's and optimizer's state as this rank holds it (sharded under FSDP), keyed
        by parameter name, for ``torch.distributed.checkpoint`` to save each rank's part of
        (and to load in place); collective: every rank calls it."""
        from torch.distributed.checkpoint.state_dict import get_state_dict

        return get_state_dict(self.module, optimizer)

    def load_state_dicts(
        self, optimizer: torch.optim.Optimizer, model: dict[str, Any], optim: dict[str, Any]
    ) -> None:
        """Put what :meth:`state_dicts` gave, loaded, back, on every rank."""
        from torch.distributed.checkpoint.state_dict import set_state_dict

        set_state_dict(self.module, optimizer, model_state_dict=model, optim_state_dict=optim)

    def without_gradient_sync(
        self, optimizer: torch.optim.Optimizer | None = None
    ) -> contextlib.AbstractContextManager:
        """A step without the strategy's collectives (the probe's compute-only step); the
        ``optimizer`` is the one the step will call."""
        raise NotImplementedError

    def comm_times(self) -> dict[str, float]:
        """The strategy's own timings of its communication, in ms (none by default)."""
        return {}

    def comm_bytes(self, config: Config) -> dict[str, float]:
        """Bytes per step each collective moves: the whole tensors' sizes, before the ring's
        2(n-1)/n or (n-1)/n (nccl-tests' busbw factors apply to these)."""
        raise NotImplementedError

    def message_bytes(self, config: Config, op: str) -> float:
        """The size of one message of ``op`` (a bucket, a unit's parameters)."""
        raise NotImplementedError

    def calls_per_step(self, config: Config) -> list[Call]:
        """Each collective call of a step as (op, the whole tensor's bytes, a broadcast's
        source rank): what :mod:`linkbench.link.crossing` turns into the bytes through each
        node's uplink. By default one call per op of :meth:`comm_bytes` (splitting a call in
        buckets moves the same bytes)."""
        return [Call(op, size) for op, size in self.comm_bytes(config).items()]

    def messages(self, config: Config) -> list[dict[str, float | str]]:
        """Per collective: its message size and how many messages a step sends."""
        out: list[dict[str, float | str]] = []
        for op, total in self.comm_bytes(config).items():
            size = min(total, self.message_bytes(config, op))
            out.append({"op": op, "bytes": size, "count": total / size if size else 0.0})
        return out


# DDP's runtime-logging sample rate that never samples (its counter is a C int).
NEVER = 2**31 - 1


class DataParallel(Parallel):
    """DDP (``strategy=ddp``, and under ZeRO-1)."""

    def __init__(self, model: nn.Module, config: Config, device: torch.device) -> None:
        delay_ms = config.debug.comm_delay_ms
        self.comm_delay = CommDelay(delay_ms, device) if delay_ms > 0 else None
        assert isinstance(config.strategy, DDPStrategy)  # ddp, zero1
        self.ddp = ddp.wrap(model, config.strategy, device, config.nvtx, self.comm_delay)
        self.module, self.model = model, self.ddp
        # DDP samples its comm/compute timings on the host; a captured step never runs that
        # host code again, so with CUDA graphs it must not sample at the capture.
        self._timed = not config.cuda_graphs
        self.ddp._set_ddp_runtime_logging_sample_rate(
            NEVER if config.cuda_graphs else config.log_every
        )

    def comm_times(self) -> dict[str, float]:
        """DDP's sampled averages of backward communication and its overlap, in ms (none
        with CUDA graphs: DDP measures them on the host, in eager steps only)."""
        if not self._timed:
            return {}
        data = self.ddp._get_ddp_logging_data()
        names = {
            "avg_backward_comm_time": "ddp_backward_comm_ms",
            "avg_backward_compute_comm_overlap_time": "ddp_comm_overlap_ms",
            "avg_backward_compute_time": "ddp_backward_compute_ms",
        }
        return {ours: data[theirs] / 1e6 for theirs, ours in names.items() if data.get(theirs)}

    def without_gradient_sync(
        self, optimizer: torch.optim.Optimizer | None = None
    ) -> contextlib.AbstractContextManager:
        return self.ddp.no_sync()

    def message_bytes(self, config: Config, op: str) -> float:
        if op == "all_reduce":  # DDP's buckets (its first is smaller; not modelled)
            assert isinstance(config.strategy, DDPStrategy)
            bucket_mb = config.strategy.bucket_cap_mb
            return bucket_mb * 2**20 * (config.strategy.comm_hook.wire_factor or 1.0)
        return self.comm_bytes(config)[op] / dist.get_world_size()  # each rank's shard

    def comm_bytes(self, config: Config) -> dict[str, float]:
        assert isinstance(config.strategy, DDPStrategy)
        wire = config.strategy.comm_hook.wire_factor
        grads = tensor_bytes(p for p in self.module.parameters() if p.requires_grad)
        return {} if wire is None else {"all_reduce": grads * wire}

    def calls_per_step(self, config: Config) -> list[Call]:
        """The gradient all-reduce, and the buffers (BatchNorm's statistics) DDP broadcasts
        from rank 0 before every forward (``broadcast_buffers``, its default)."""
        grads = DataParallel.comm_bytes(self, config)  # a subclass's own calls are its own
        calls = [Call(op, size) for op, size in grads.items()]
        buffers = tensor_bytes(self.module.buffers())
        if buffers and self.ddp.broadcast_buffers:
            calls.append(Call("broadcast", float(buffers)))
        return calls


class ZeroOne(DataParallel):
    """DDP with ZeroRedundancyOptimizer: gradients all-reduced, updated shards broadcast."""

    def build_optimizer(
        self, config: Config, lr: float, device: torch.device, grad_scaler: bool,
        capturable: bool = False,
    ) -> torch.optim.Optimizer:  # fmt: skip
        """The configured optimizer inside ``ZeroRedundancyOptimizer``, on each rank's
        share of the parameters."""
        from torch.distributed.optim import ZeroRedundancyOptimizer

        cls, kwargs = optimizer_class(
            config.optimizer, lr, config.model.weight_decay, device, grad_scaler, capturable
        )
        return ZeroRedundancyOptimizer(self.model.parameters(), optimizer_class=cls, **kwargs)

    def state_dicts(self, optimizer: torch.optim.Optimizer) -> StateDicts:
        """The model's state, and this rank's partition of the optimizer state
        (``ZeroRedundancyOptimizer.optim``) flattened to one key per parameter name and
        setting, so each rank saves and loads its own keys whatever the number of ranks."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(flatten_optimizer_state_dict=True)
        local = optimizer.optim  # type: ignore[attr-defined]
        optim = get_optimizer_state_dict(self.module, local, options=options)
        return self.module.state_dict(), optim

    def load_state_dicts(
        self, optimizer: torch.optim.Optimizer, model: dict[str, Any], optim: dict[str, Any]
    ) -> None:
        """The model on every rank, this rank's partition into its local optimizer, whose
        settings (the learning rate the schedule reached) go back to the global param groups
        that ZeroRedundancyOptimizer copies into it at every step."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        self.module.load_state_dict(model)
        local = optimizer.optim  # type: ignore[attr-defined]
        options = StateDictOptions(flatten_optimizer_state_dict=True)
        set_optimizer_state_dict(self.module, local, optim, options=options)
        for mine, whole in zip(local.param_groups, optimizer.param_groups, strict=True):
            if mine["params"]:
                whole.update({k: v for k, v in mine.items() if k != "params"})

    def comm_bytes(self, config: Config) -> dict[str, float]:
        params = tensor_bytes(p for p in self.module.parameters() if p.requires_grad)
        return {**super().comm_bytes(config), "broadcast": float(params)}

    def calls_per_step(self, config: Config) -> list[Call]:
        """Each rank broadcasts the parameters it updated (about 1/n of them, as the
        optimizer partitioned them) from itself."""
        n = dist.get_world_size()
        share = self.comm_bytes(config)["broadcast"] / n
        return super().calls_per_step(config) + [Call("broadcast", share, r) for r in range(n)]

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
    """FSDP2 ``fully_shard`` per block, then the root (``strategy=fsdp``), on a 2-D mesh
    with ``strategy=hsdp``: sharded in each replica, replicated across them."""

    def __init__(self, model: nn.Module, config: Config, device: torch.device) -> None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        s = config.strategy
        assert isinstance(s, FSDPStrategy)
        self._param_dtype = getattr(torch, str(s.param_dtype)) if s.param_dtype else None
        self._reduce_dtype = getattr(torch, str(s.reduce_dtype)) if s.reduce_dtype else None
        self._sizes = {
            "params": tensor_bytes(model.parameters(), self._param_dtype),
            "grads": tensor_bytes(
                (p for p in model.parameters() if p.requires_grad),
                self._reduce_dtype or self._param_dtype,
            ),
        }
        self._replicas = getattr(s, "replicas", None) or 1  # strategy=hsdp's, resolved
        shard: dict[str, Any] = {
            "mesh": data_mesh(device.type, dist.get_world_size(), self._replicas),
            "reshard_after_forward": s.reshard_after_forward,
            "mp_policy": MixedPrecisionPolicy(self._param_dtype, self._reduce_dtype),
        }
        self.blocks = blocks(model, list(s.shard_classes))
        for block in self.blocks:
            fully_shard(block, **shard)
        fully_shard(model, **shard)
        self._reshard_after_forward = s.reshard_after_forward
        self.module = self.model = model

    def build_optimizer(
        self, config: Config, lr: float, device: torch.device, grad_scaler: bool,
        capturable: bool = False,
    ) -> torch.optim.Optimizer:  # fmt: skip
        """The configured optimizer over the DTensor parameters, with PyTorch's default
        (foreach) kernels rather than fused ones."""
        cls, kwargs = optimizer_class(
            config.optimizer, lr, config.model.weight_decay, device, grad_scaler, capturable,
            fused=False,
        )  # fmt: skip
        return cls(self.model.parameters(), **kwargs)

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
        # resharded it; gradients are reduce-scattered once; with replicas (HSDP), each
        # replica's gradient shard is then all-reduced across the replicas.
        gathers = 2 if self._reshard_after_forward else 1
        moved = {
            "all_gather": float(self._sizes["params"] * gathers),
            "reduce_scatter": float(self._sizes["grads"]),
        }
        if self._replicas > 1:
            moved["all_reduce"] = self._sizes["grads"] * self._replicas / dist.get_world_size()
        return moved

    def calls_per_step(self, config: Config) -> list[Call]:
        """The gathers and the reduce-scatter inside each shard group (a row of the mesh),
        and with replicas the gradient shards' all-reduce inside each replicate group (a
        column): only those cross between nodes when a row is a node."""
        world, moved = dist.get_world_size(), self.comm_bytes(config)
        shard = world // self._replicas
        rows = [tuple(range(i * shard, (i + 1) * shard)) for i in range(self._replicas)]
        calls = [Call(op, moved[op], group=row) for row in rows
                 for op in ("all_gather", "reduce_scatter")]  # fmt: skip
        if self._replicas > 1:
            columns = [tuple(range(j, world, shard)) for j in range(shard)]
            calls += [Call("all_reduce", moved["all_reduce"], group=c) for c in columns]
        return calls


def data_mesh(device_type: str, world: int, replicas: int = 1) -> Any:
    """The job's data-parallel ``DeviceMesh``: 1-D ``("shard",)`` over the world, or with
    ``replicas`` 2-D ``("replicate", "shard")``, rank r at (r // shard, r % shard), so a
    shard group is ``world / replicas`` consecutive ranks (one node of an emulated cluster,
    whose nodes are consecutive ranks, as torchrun's are)."""
    from torch.distributed.device_mesh import init_device_mesh

    if replicas <= 1:
        return init_device_mesh(device_type, (world,), mesh_dim_names=("shard",))
    return init_device_mesh(
        device_type, (replicas, world // replicas), mesh_dim_names=("replicate", "shard")
    )


def strategy_class(strategy: StrategyConfig) -> type[Parallel]:
    """The :class:`Parallel` subclass ``strategy._target_`` names."""
    return subclass_named("strategy._target_", strategy._target_, Parallel, has="comm_bytes")


def parallelize(
    runtime: Runtime, model: nn.Module, config: Config, device: torch.device
) -> Parallel:
    """The model under ``config.strategy``, by the runtime class the plan resolved for it
    (``runtime.strategy``: :func:`strategy_class`)."""
    cls = runtime.strategy
    assert issubclass(cls, Parallel)  # strategy_class checked it
    return cls(model, config, device)
