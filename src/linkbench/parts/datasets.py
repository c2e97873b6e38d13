"""The real data sets behind ``data=``, each with its training split and a held-out split.

- ``fake``: torchvision's FakeData; the held-out split is ``data.eval_size`` more images of
  the same kind, drawn from the following random indices (FakeData's ``random_offset``).
- ``imagefolder``: ``data.root`` (or ``data.root/train``); held out: ``data.root/val`` where
  it exists, else a seeded ``data.eval_fraction`` of the images.
- ``cifar10``: the training and test splits.
- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images, no download),
  grey levels 0..16 scaled to 0..1, upsampled to ``data.image_size`` and repeated over the
  model's input channels; a fixed stratified split holds out ``data.eval_fraction``.

Synthetic data has no data set: :mod:`linkbench.parts.data` makes its held-out batch itself.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset, TensorDataset

from linkbench.config.choices import DataName
from linkbench.config.data_sizes import SPLIT_SEED, digits_arrays
from linkbench.config.groups import DataConfig
from linkbench.errors import ConfigError

CIFAR10_HOME = "https://www.cs.toronto.edu/~kriz/cifar.html"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DIGITS_LEVELS = 16.0  # sklearn's digits are grey levels 0..16


def _digits(data: DataConfig, channels: int, held_out: bool) -> Dataset:
    train_x, test_x, train_y, test_y = digits_arrays(data)
    x, y = (test_x, test_y) if held_out else (train_x, train_y)
    images = torch.tensor(x, dtype=torch.float32).unsqueeze(1) / DIGITS_LEVELS
    size = data.image_size
    images = F.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
    images = (images - 0.5) / 0.5
    return TensorDataset(images.repeat(1, channels, 1, 1), torch.tensor(y, dtype=torch.long))


def _seeded_split(count: int, fraction: float) -> tuple[list[int], list[int]]:
    """(training indices, held-out indices) of a fixed random split."""
    order = torch.randperm(count, generator=torch.Generator().manual_seed(SPLIT_SEED)).tolist()
    cut = max(1, round(count * fraction))
    return sorted(order[cut:]), sorted(order[:cut])


def dataset(data: DataConfig, channels: int, local_rank: int, held_out: bool = False) -> Dataset:
    """The training split of ``data``, or its held-out split."""
    from torchvision import datasets
    from torchvision import transforms as T

    size = data.image_size
    normalize = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
    if data.name == DataName.digits:
        return _digits(data, channels, held_out)
    if data.name == DataName.fake:
        return datasets.FakeData(
            size=data.eval_size if held_out else data.size,
            image_size=(channels, size, size),
            num_classes=data.num_classes,
            transform=T.ToTensor(),
            random_offset=data.size if held_out else 0,
        )
    assert data.root is not None  # the plan checked it
    root = Path(data.root).expanduser()
    if data.name == DataName.imagefolder:
        plain = T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(), normalize])
        if (root / "val").is_dir() and held_out:
            return datasets.ImageFolder(str(root / "val"), transform=plain)
        augment = [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), normalize]
        train_root = root / "train" if (root / "train").is_dir() else root
        images = datasets.ImageFolder(
            str(train_root), transform=plain if held_out else T.Compose(augment)
        )
        if (root / "val").is_dir():
            return images
        train, test = _seeded_split(len(images), data.eval_fraction)
        return Subset(images, test if held_out else train)
    plain_steps = [] if size == 32 else [T.Resize(size, antialias=True)]
    augment = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), *plain_steps]
    transform = T.Compose([*(plain_steps if held_out else augment), T.ToTensor(), normalize])
    if data.download and local_rank == 0:
        datasets.CIFAR10(str(root), train=not held_out, download=True)
    if data.download:
        dist.barrier()
    return datasets.CIFAR10(str(root), train=not held_out, download=False, transform=transform)


def fetch(data: DataConfig) -> None:
    """``data.download=true``: fetch the data set into ``data.root`` once, in the launching
    process, before any worker starts; a failure (offline, say) is one sentence saying how
    to provide the files instead."""
    if not (data.download and data.name == DataName.cifar10):
        return
    from torchvision import datasets

    assert data.root is not None  # the plan requires it for cifar10
    root = Path(data.root).expanduser()
    try:
        datasets.CIFAR10(str(root), train=True, download=True)
    except (OSError, RuntimeError) as error:  # urllib's URLError is an OSError
        cause = str(getattr(error, "reason", None) or error).replace("\n", " ")
        raise ConfigError(
            f"data.download=true could not fetch CIFAR-10 into {root} ({cause}); if this "
            f"machine is offline, download cifar-10-python.tar.gz from {CIFAR10_HOME} on one "
            "that is not, extract it into data.root (it holds cifar-10-batches-py), and run "
            "without data.download=true."
        ) from None
