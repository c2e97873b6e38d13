"""Where a rank's batches come from: synthetic tensors or a real torchvision data set.

``synthetic`` makes one batch on the device and yields it every step, so no input pipeline
is in the measurement. The others go through a DataLoader with a DistributedSampler
(``set_epoch`` every epoch), pinned memory on GPU and non-blocking copies.

Where a stream is, for a checkpoint, is two integers: the epoch and the batches taken from
it. The sampler's permutation depends on the seed and the epoch alone, so a stream started
from them (its sampler skipping the indices already taken, without loading their samples)
continues bit for bit. torchdata's ``StatefulDataLoader`` is not used: for a sampler without
state of its own it keeps the same count ("the number of batches yielded", used "to naively
fast-forward the sampler": pytorch/data, ``torchdata/stateful_dataloader/README.md``), and
the epoch, which ``set_epoch`` gives the sampler outside the loader, would still be ours; it
would add a dependency and save nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.utils.data import DataLoader, DistributedSampler, Subset

from linkbench.config.choices import ModelInput
from linkbench.config.data import LoadedData
from linkbench.config.plan import JobPlan
from linkbench.config.schema import Config
from linkbench.parts.datasets import DataSource
from linkbench.parts.rank import Rank

Batch = tuple[torch.Tensor, torch.Tensor]
RANK_SEED_STRIDE = 1000  # ranks per job seed that get distinct synthetic data


@dataclass
class Batches:
    """An endless stream of (inputs, targets) on the rank's device, and where it is: the
    epoch and how many batches of it were taken (for checkpoints; synthetic data has none)."""

    stream: Iterator[Batch]
    position: dict[str, int] = field(default_factory=dict)
    epoch_samples: int | None = None
    """Samples of one epoch over every rank (the data set's size; None for synthetic data)."""


class ResumableSampler(DistributedSampler):
    """A DistributedSampler whose next epoch can start ``skip`` samples in."""

    skip = 0

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())[self.skip :]
        self.skip = 0
        return iter(indices)


def _synthetic(config: Config, batch: int, device: torch.device, seed: int) -> Batches:
    model, data = config.model, config.data
    generator = torch.Generator(device="cpu").manual_seed(seed)
    if model.input == ModelInput.tokens:
        tokens = torch.randint(model.vocab_size, (batch, model.seq_len + 1), generator=generator)
        tokens = tokens.to(device)
        fixed = (tokens[:, :-1], tokens[:, 1:])
    else:
        shape = (batch, model.in_channels, data.image_size, data.image_size)
        images = torch.randn(*shape, generator=generator).to(device)
        if model.channels_last and device.type == "cuda":
            images = images.contiguous(memory_format=torch.channels_last)
        labels = torch.randint(data.num_classes, (batch,), generator=generator).to(device)
        fixed = (images, labels)

    def forever() -> Iterator[Batch]:
        while True:
            yield fixed

    return Batches(forever())


def _loader(source: type[DataSource], config: Config, batch: int, me: Rank) -> Batches:
    data, device, replicas = config.data, me.device, me.dp_size
    dataset = source.dataset(config, me.local_rank)
    sampler = ResumableSampler(
        dataset, replicas, me.dp_rank, shuffle=True, seed=config.seed, drop_last=True
    )
    # an option from outside the package says none: load in the rank's own process
    workers = data.num_workers if isinstance(data, LoadedData) else 0
    loader = DataLoader(
        dataset,
        batch_size=batch,
        sampler=sampler,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        drop_last=True,
        persistent_workers=workers > 0,
    )
    if len(loader) == 0:
        raise ValueError(
            f"data={data.name} gives each of {replicas} data-parallel replicas "
            f"{len(sampler)} samples, fewer than one batch of {batch}; use more data or a "
            "smaller batch."
        )
    channels_last = config.model.channels_last and device.type == "cuda"
    memory_format = torch.channels_last if channels_last else torch.contiguous_format

    position = {"epoch": 0, "batch": 0}  # read when the first batch is taken

    def forever() -> Iterator[Batch]:
        while True:
            sampler.set_epoch(position["epoch"])
            sampler.skip = position["batch"] * batch
            for images, labels in loader:
                position["batch"] += 1
                yield (
                    images.to(device, non_blocking=True, memory_format=memory_format),
                    labels.to(device, non_blocking=True),
                )
            position["epoch"] += 1
            position["batch"] = 0

    epoch = len(loader) * batch * replicas  # drop_last: whole global batches only
    return Batches(forever(), position, epoch)


def make_batches(plan: JobPlan, batch: int, me: Rank) -> Batches:
    """The batches rank ``me`` trains on: its data-parallel replica's (synthetic data differs
    between replicas by seed; the ranks of one replica take the same batches). The
    stream starts at its ``position`` when its first batch is taken, so a checkpoint's
    position put there before continues the stream where the checkpoint left it."""
    config = plan.config
    if config.data.on_device:
        return _synthetic(config, batch, me.device, seed=rank_seed(config.seed, me.dp_rank))
    return _loader(plan.runtime.data, config, batch, me)


def rank_seed(seed: int, rank: int) -> int:
    """A seed of this (data-parallel) rank's own, distinct from every other's for any job
    seed below :data:`RANK_SEED_STRIDE`."""
    return seed * RANK_SEED_STRIDE + rank


def held_out_batches(plan: JobPlan, batch: int, me: Rank) -> Iterator[Batch]:
    """This rank's share of the held-out split, every sample once over the data-parallel
    replicas (replica r takes samples r, r + replicas, ...: no padding duplicates), on the
    rank's device."""
    held_out = plan.runtime.data.dataset(plan.config, me.local_rank, held_out=True)
    mine = Subset(held_out, list(range(me.dp_rank, len(held_out), me.dp_size)))
    loader = DataLoader(mine, batch_size=batch, num_workers=0, pin_memory=me.device.type == "cuda")
    for inputs, targets in loader:
        yield inputs.to(me.device, non_blocking=True), targets.to(me.device, non_blocking=True)
