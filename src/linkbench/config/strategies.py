"""The built-in strategies (``strategy/``), one dataclass per option: its keys, its
capabilities (what :meth:`~linkbench.config.schema.StrategyConfig.check` lets it run with),
and the ``_target_`` of its runtime class in :mod:`linkbench.parts.strategy`, which only the
workers import. :func:`linkbench.config.registry.register_schema` stores each in Hydra's
ConfigStore under its name, so ``strategy=fsdp`` composes :class:`FSDPStrategy` and its
keys alone.

A new built-in strategy, settings of its own included, is one dataclass here (and its entry
in :data:`STRATEGIES`) and one runtime class."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from linkbench.config.checks import require, require_positive
from linkbench.config.choices import TensorDtype
from linkbench.config.groups import CommHookConfig
from linkbench.config.schema import Config, StrategyConfig


@dataclass
class DDPStrategy(StrategyConfig):
    """``strategy=ddp``: DistributedDataParallel, the whole model on every rank, gradients
    all-reduced per bucket, through the communication hook its own group
    ``strategy/comm_hook`` chooses (``strategy/comm_hook=bf16``)."""

    name: str = "ddp"
    _target_: str = "linkbench.parts.strategy.DataParallel"
    bucket_cap_mb: float = 25.0
    """DDP's gradient bucket size (its default)."""
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    find_unused_parameters: bool = False
    comm_hook: CommHookConfig = field(default_factory=CommHookConfig)

    groups = {"comm_hook": "none"}
    captures_cuda_graphs = True
    scales_gradients = True
    hooks_buckets = True

    def __post_init__(self) -> None:
        require_positive("strategy.", bucket_cap_mb=self.bucket_cap_mb)

    def hook(self) -> CommHookConfig:
        return self.comm_hook

    def check(self, config: Config) -> None:
        super().check(config)
        require(
            not (config.cuda_graphs and self.find_unused_parameters),
            "cuda_graphs=true needs the same graph every step; set "
            "strategy.find_unused_parameters=false.",
        )


@dataclass
class ZeroOneStrategy(DDPStrategy):
    """``strategy=zero1``: ZeRO stage 1, DDP with the optimizer state sharded by torch's
    ZeroRedundancyOptimizer (each rank updates its share of the parameters and broadcasts
    it)."""

    name: str = "zero1"
    _target_: str = "linkbench.parts.strategy.ZeroOne"

    captures_cuda_graphs = False
    scales_gradients = False


@dataclass
class FSDPStrategy(StrategyConfig):
    """``strategy=fsdp``: FSDP2 (``torch.distributed.fsdp.fully_shard``) per block, then the
    root: parameters sharded and all-gathered for every block's forward and backward,
    gradients reduce-scattered."""

    name: str = "fsdp"
    _target_: str = "linkbench.parts.strategy.FullyShardedParallel"
    reshard_after_forward: bool = True
    """Free each block's gathered parameters after its forward (gather again in backward);
    false keeps them, trading memory for one all-gather per step."""
    param_dtype: TensorDtype | None = None
    """The dtype parameters are gathered and computed in (null: their own)."""
    reduce_dtype: TensorDtype | None = None
    """The dtype gradients are reduce-scattered in (null: the parameters')."""
    shard_classes: list[str] = field(default_factory=list)
    """Class names of the modules sharded one by one; empty: every module of a Sequential
    or ModuleList that holds two or more of its kind."""

    bf16_hint = " or strategy.param_dtype=bfloat16"
    compression_hint = ", or strategy.reduce_dtype=bfloat16 to compress FSDP's gradients"


@dataclass
class HSDPStrategy(FSDPStrategy):
    """``strategy=hsdp``: hybrid sharding, FSDP2 on a 2-D mesh (``fully_shard(mesh=mesh[
    "replicate", "shard"])``): the model sharded over the ranks of a node, replicated across
    nodes, so only the gradient shards' all-reduce crosses between nodes."""

    name: str = "hsdp"
    replicas: int | None = None
    """Replicas of the sharded model (the mesh's ``replicate`` dimension); each shards it
    over world / replicas ranks. null: one per node (``interconnect.nodes`` on an emulated
    cluster, the launcher's nodes under torchrun or SLURM)."""

    def resolve(self, config: Config, nodes: int, data: int) -> StrategyConfig:
        """The replicas: as given, or one per node; at least 2 (one is strategy=fsdp), a
        divisor of the data-parallel ranks."""
        replicas = self.replicas or nodes
        require(
            replicas >= 2,
            f"strategy=hsdp replicates the sharded model across nodes and this job has "
            f"{'strategy.replicas=1' if self.replicas else 'one node'}; run it on an emulated "
            "cluster (interconnect=emulated interconnect.nodes=2 devices=4) or across nodes "
            "under torchrun or SLURM, set strategy.replicas=2 or more, or use strategy=fsdp.",
        )
        require(
            data % replicas == 0,
            f"strategy=hsdp with {replicas} replicas does not divide this job's {data} "
            f"data-parallel ranks; set strategy.replicas to a divisor of {data}, or devices= "
            f"a multiple of {replicas}.",
        )
        return dataclasses.replace(self, replicas=replicas)


STRATEGIES: dict[str, type[StrategyConfig]] = {
    "ddp": DDPStrategy,
    "zero1": ZeroOneStrategy,
    "fsdp": FSDPStrategy,
    "hsdp": HSDPStrategy,
}
