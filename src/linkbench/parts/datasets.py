"""The runtime classes of the ``data`` options (each a :class:`DataSource`, named by its
option's ``_target_``: :mod:`linkbench.config.data`), which build a data set's training split
and its held-out split on a rank:

- ``synthetic``: no training data set (its batches are made on the device:
  :mod:`linkbench.parts.data`); held out: ``data.eval_size`` random samples of a seed no
  job trains on.
- ``fake``: torchvision's FakeData; the held-out split is ``data.eval_size`` more images of
  the same kind, drawn from the following random indices (FakeData's ``random_offset``).
- ``imagefolder``: ``data.root`` (or ``data.root/train``); held out: ``data.root/val`` where
  it exists, else a seeded ``data.eval_fraction`` of the images.
- ``cifar10``: the training and test splits.
- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images, no download),
  grey levels 0..16 scaled to 0..1, upsampled to ``data.image_size`` and repeated over the
  model's input channels; a fixed stratified split holds out ``data.eval_fraction``.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import Dataset, Subset, TensorDataset

from linkbench.config.choices import ModelInput
from linkbench.config.data import (
    SPLIT_SEED,
    Cifar10Data,
    DataConfig,
    DigitsData,
    FakeData,
    ImageFolderData,
    SyntheticData,
    digits_arrays,
)
from linkbench.config.schema import Config
from linkbench.config.targets import subclass_named
from linkbench.errors import ConfigError

CIFAR10_HOME = "https://www.cs.toronto.edu/~kriz/cifar.html"

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
DIGITS_LEVELS = 16.0  # sklearn's digits are grey levels 0..16
HELD_OUT_SEED = 2**31 - 1  # synthetic held-out data: a seed no job's training data uses


def _digits(data: DigitsData, channels: int, held_out: bool) -> Dataset:
    train_x, test_x, train_y, test_y = digits_arrays(data.eval_fraction)
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


class DataSource:
    """One data option at run time; its methods are class methods."""

    @classmethod
    def dataset(cls, config: Config, local_rank: int, held_out: bool = False) -> Dataset:
        """The training split of ``config.data``, or its held-out split, for a model that
        takes ``config.model``'s input (rank ``local_rank`` of its node)."""
        raise NotImplementedError

    @classmethod
    def fetch(cls, data: DataConfig) -> None:
        """Fetch what the data set needs onto this host, once, in the launching process
        before any worker starts (nothing by default); a failure is one ConfigError
        sentence."""


class Synthetic(DataSource):
    """``data=synthetic``: its held-out set (its training batches are made on the device)."""

    @classmethod
    def dataset(cls, config: Config, local_rank: int, held_out: bool = False) -> Dataset:
        assert held_out and isinstance(config.data, SyntheticData)  # no training data set
        model, data = config.model, config.data
        generator = torch.Generator(device="cpu").manual_seed(HELD_OUT_SEED)
        n = data.eval_size
        if model.input == ModelInput.tokens:
            tokens = torch.randint(model.vocab_size, (n, model.seq_len + 1), generator=generator)
            return TensorDataset(tokens[:, :-1], tokens[:, 1:])
        shape = (n, model.in_channels, data.image_size, data.image_size)
        images = torch.randn(*shape, generator=generator)
        return TensorDataset(images, torch.randint(data.num_classes, (n,), generator=generator))


class Digits(DataSource):
    """``data=digits``."""

    @classmethod
    def dataset(cls, config: Config, local_rank: int, held_out: bool = False) -> Dataset:
        assert isinstance(config.data, DigitsData)
        return _digits(config.data, config.model.in_channels, held_out)


class Fake(DataSource):
    """``data=fake``."""

    @classmethod
    def dataset(cls, config: Config, local_rank: int, held_out: bool = False) -> Dataset:
        from torchvision import datasets
        from torchvision import transforms as T

        data = config.data
        assert isinstance(data, FakeData)
        size, channels = data.image_size, config.model.in_channels
        return datasets.FakeData(
            size=data.eval_size if held_out else data.size,
            image_size=(channels, size, size),
            num_classes=data.num_classes,
            transform=T.ToTensor(),
            random_offset=data.size if held_out else 0,
        )


class ImageFolder(DataSource):
    """``data=imagefolder``."""

    @classmethod
    def dataset(cls, config: Config, local_rank: int, held_out: bool = False) -> Dataset:
        from torchvision import datasets
        from torchvision import transforms as T

        data = config.data
        assert isinstance(data, ImageFolderData)
        size, normalize = data.image_size, T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
        plain = T.Compose([T.Resize(size), T.CenterCrop(size), T.ToTensor(), normalize])
        if data.has_val and held_out:
            return datasets.ImageFolder(str(data.path / "val"), transform=plain)
        augment = [T.RandomResizedCrop(size), T.RandomHorizontalFlip(), T.ToTensor(), normalize]
        images = datasets.ImageFolder(
            str(data.train_root), transform=plain if held_out else T.Compose(augment)
        )
        if data.has_val:
            return images
        train, test = _seeded_split(len(images), data.eval_fraction)
        return Subset(images, test if held_out else train)


class Cifar10(DataSource):
    """``data=cifar10``: downloaded once by :meth:`fetch` with ``data.download=true``."""

    @classmethod
    def dataset(cls, config: Config, local_rank: int, held_out: bool = False) -> Dataset:
        from torchvision import datasets
        from torchvision import transforms as T

        data = config.data
        assert isinstance(data, Cifar10Data)
        size, root = data.image_size, str(data.path)
        normalize = T.Normalize(IMAGENET_MEAN, IMAGENET_STD)
        plain_steps = [] if size == 32 else [T.Resize(size, antialias=True)]
        augment = [T.RandomCrop(32, padding=4), T.RandomHorizontalFlip(), *plain_steps]
        transform = T.Compose([*(plain_steps if held_out else augment), T.ToTensor(), normalize])
        if data.download and local_rank == 0:
            datasets.CIFAR10(root, train=not held_out, download=True)
        if data.download:
            dist.barrier()
        return datasets.CIFAR10(root, train=not held_out, download=False, transform=transform)

    @classmethod
    def fetch(cls, data: DataConfig) -> None:
        """``data.download=true``: fetch CIFAR-10 into ``data.root``; a failure (offline,
        say) is one sentence saying how to provide the files instead."""
        assert isinstance(data, Cifar10Data)
        if not data.download:
            return
        from torchvision import datasets

        root = data.path
        try:
            datasets.CIFAR10(str(root), train=True, download=True)
        except (OSError, RuntimeError) as error:  # urllib's URLError is an OSError
            cause = str(getattr(error, "reason", None) or error).replace("\n", " ")
            raise ConfigError(
                f"data.download=true could not fetch CIFAR-10 into {root} ({cause}); if this "
                f"machine is offline, download cifar-10-python.tar.gz from {CIFAR10_HOME} on "
                "one that is not, extract it into data.root (it holds cifar-10-batches-py), "
                "and run without data.download=true."
            ) from None


def data_class(data: DataConfig) -> type[DataSource]:
    """The :class:`DataSource` subclass ``data._target_`` names."""
    return subclass_named("data._target_", data._target_, DataSource, has="dataset")
