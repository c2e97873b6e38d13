"""How a job's ranks divide among the ways of parallelism, resolved once in the plan (as
torchtitan's ``ParallelDims`` does): pipeline stages x data-parallel replicas x
tensor-parallel ranks, tensor-parallel innermost so that its ranks are neighbours (on one
node, behind the fastest link).

Everything that means "one replica of the model" reads the data-parallel size and rank, not
the world: the global batch (``batch`` per replica), the sampler and its share of the data,
the synthetic data's seed, the held-out split, throughput in samples and the loss and
evaluation means (each replica's loss is counted once, on the rank that holds it). The
built-in strategies are data-parallel only (tensor and pipeline sizes 1); a strategy's option
says its sizes (:meth:`linkbench.config.schema.StrategyConfig.model_parallel_sizes`).
"""

from __future__ import annotations

from dataclasses import dataclass


def fits(world_size: int, tensor: int, pipeline: int) -> bool:
    """Whether replicas of ``tensor x pipeline`` ranks fill ``world_size`` ranks exactly."""
    return tensor >= 1 and pipeline >= 1 and world_size % (tensor * pipeline) == 0


@dataclass(frozen=True)
class Layout:
    """The world's ranks as ``pipeline x data x tensor`` (rank = (p * data + d) * tensor + t)."""

    world_size: int
    tensor: int = 1
    pipeline: int = 1

    def __post_init__(self) -> None:
        if not fits(self.world_size, self.tensor, self.pipeline):  # the plan said why
            raise ValueError(f"{self} does not divide its world")

    @property
    def data(self) -> int:
        """Data-parallel replicas: the world over the ranks one replica of the model takes."""
        return self.world_size // (self.tensor * self.pipeline)

    def tensor_rank(self, rank: int) -> int:
        return rank % self.tensor

    def data_rank(self, rank: int) -> int:
        return (rank // self.tensor) % self.data

    def pipeline_rank(self, rank: int) -> int:
        return rank // (self.tensor * self.data)

    def holds_loss(self, rank: int) -> bool:
        """Whether ``rank`` counts its replica's loss: the first tensor-parallel rank of the
        last pipeline stage (the others hold the same loss, or none)."""
        return self.tensor_rank(rank) == 0 and self.pipeline_rank(rank) == self.pipeline - 1

    def describe(self) -> dict[str, int]:
        """The sizes, for result.json."""
        return {"data": self.data, "tensor": self.tensor, "pipeline": self.pipeline}
