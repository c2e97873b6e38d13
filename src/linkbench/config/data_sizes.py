"""The sizes of the data sets behind ``data=``, known to the plan without building them (no
torch): the plan turns ``epochs`` into steps and checks the held-out batch with them, and
takes an image folder's class count from its class folders. The data sets themselves are
:mod:`linkbench.parts.datasets`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from linkbench.config.choices import DataName
from linkbench.config.groups import DataConfig

CIFAR10_TRAIN, CIFAR10_TEST = 50_000, 10_000
SPLIT_SEED = 0  # the held-out split is the same for every job, whatever its seed


def digits_arrays(data: DataConfig) -> tuple[Any, Any, Any, Any]:
    """scikit-learn's digits split into (train images, held-out images, train labels,
    held-out labels), the same split for every job."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    return train_test_split(
        digits.images,
        digits.target,
        test_size=data.eval_fraction,
        stratify=digits.target,
        random_state=SPLIT_SEED,
    )


def held_out_size(data: DataConfig) -> int | None:
    """Samples in the held-out split (None where only building it would tell: image folders)."""
    if data.name in (DataName.synthetic, DataName.fake):
        return data.eval_size
    if data.name == DataName.digits:
        return len(digits_arrays(data)[1])
    if data.name == DataName.cifar10:
        return CIFAR10_TEST
    return None


def _train_root(data: DataConfig) -> Path:
    assert data.root is not None
    root = Path(data.root).expanduser()
    return root / "train" if (root / "train").is_dir() else root


def folder_classes(data: DataConfig) -> int | None:
    """An image folder's classes, as torchvision's ImageFolder finds them (the folders under
    its training root); None for the other data, whose count is ``data.num_classes``."""
    if data.name != DataName.imagefolder:
        return None
    return sum(1 for p in _train_root(data).iterdir() if p.is_dir())


def train_size(data: DataConfig) -> int | None:
    """Images in the training split, known without building it (None for synthetic data)."""
    if data.name == DataName.synthetic:
        return None
    if data.name == DataName.fake:
        return data.size
    if data.name == DataName.digits:
        return len(digits_arrays(data)[0])
    if data.name == DataName.cifar10:
        return CIFAR10_TRAIN
    assert data.root is not None
    count = sum(1 for p in _train_root(data).rglob("*") if p.is_file())
    has_val = (Path(data.root).expanduser() / "val").is_dir()
    return count if has_val else count - max(1, round(count * data.eval_fraction))
