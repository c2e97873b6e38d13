"""``data/``: where the batches come from, one dataclass per option: its keys (and only its
keys: ``data=digits --cfg job`` shows no ``data.root``), its checks, the sizes the plan turns
``epochs`` into steps with and checks the held-out batch against (its :meth:`~DataConfig.survey`,
read by the launcher before the plan, without building the data set, so without torch), and
the ``_target_`` of its runtime class in
:mod:`linkbench.parts.datasets`, which builds the data sets on each rank.
:func:`linkbench.config.registry.register_schema` stores each in Hydra's ConfigStore under
its name.

A new data option, settings of its own included, is one dataclass here (and its entry in
:data:`DATA`) and one runtime class (docs/extending.md). One from outside the package
composes onto :class:`DataConfig`: its YAML names its runtime class and keeps its own keys
under ``options``; the plan knows no size of it (``epochs`` and ``samples`` are refused)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import II, MISSING

from linkbench.config.checks import require, require_not_negative, require_positive
from linkbench.config.data_check import cifar_problem, classes_of, image_folder_problem

CIFAR10_TRAIN, CIFAR10_TEST = 50_000, 10_000
SPLIT_SEED = 0  # the held-out split is the same for every job, whatever its seed


@dataclass(frozen=True)
class DataFound:
    """What a data option holds, as its :meth:`DataConfig.survey` found it (None: not known
    without building the data set)."""

    train_size: int | None = None
    """Samples in the training split."""
    held_out_size: int | None = None
    """Samples in the held-out split."""
    classes: int | None = None
    """The classes the data itself holds (None: ``data.num_classes`` says them)."""


@dataclass
class DataConfig:
    """``data/``: the keys every option has, and what the plan asks of one."""

    name: str = MISSING
    _target_: str = MISSING
    """The runtime class, a ``linkbench.parts.datasets.DataSource`` subclass."""
    image_size: int = 32
    num_classes: int = 10
    options: dict[str, Any] = field(default_factory=dict)
    """A data option from outside the package: its own keys."""

    on_device: ClassVar[bool] = False
    """Made on each rank's device, batch by batch, in whatever form the model takes (images
    or tokens): no data set, no loader, no size."""
    learnable: ClassVar[bool] = True
    """Its labels follow its inputs, so held-out accuracy says what training learnt (the
    summary judges accuracy only then: result.json's ``data_learnable``)."""

    def __post_init__(self) -> None:
        require(
            self.image_size > 0,
            f"data.image_size={self.image_size} must be positive (it follows model.image_size "
            "unless set).",
        )
        require(
            self.num_classes > 0,
            f"data.num_classes={self.num_classes} must be positive (it follows "
            "model.num_classes unless set).",
        )

    def check(self, global_batch: int) -> None:
        """Refuse, in one sentence naming the key and the fix, what cannot feed a job of
        ``global_batch`` samples a step (before any worker starts; from the config alone)."""

    def survey(self) -> DataFound:
        """What the data holds, read without changing anything (the launcher asks before the
        plan, which decides from it): data that is not where the option reads it, or holds
        nothing of its kind, is refused in one sentence naming the key and the fix."""
        return DataFound()


@dataclass
class SyntheticData(DataConfig):
    """``data=synthetic``: random tensors made once on the device, so no input pipeline is
    in the measurement."""

    name: str = "synthetic"
    _target_: str = "linkbench.parts.datasets.Synthetic"
    image_size: int = II("model.image_size")
    num_classes: int = II("model.num_classes")
    eval_size: int = 1_000
    """Samples in the held-out set."""

    on_device = True
    learnable = False  # random labels: its accuracy is chance

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("data.", eval_size=self.eval_size)

    def survey(self) -> DataFound:
        return DataFound(held_out_size=self.eval_size)


@dataclass
class LoadedData(DataConfig):
    """A data set read through a DataLoader with a DistributedSampler."""

    num_workers: int = 2
    """DataLoader worker processes per rank."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_not_negative("data.", num_workers=self.num_workers)


@dataclass
class FakeData(LoadedData):
    """``data=fake``: torchvision's FakeData; the held-out split is ``data.eval_size`` more
    images of the same kind."""

    name: str = "fake"
    _target_: str = "linkbench.parts.datasets.Fake"
    image_size: int = II("model.image_size")
    num_classes: int = II("model.num_classes")
    size: int = 10_000
    """Images in the data set."""
    eval_size: int = 1_000
    """Images in the held-out set."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_positive("data.", size=self.size, eval_size=self.eval_size)

    def check(self, global_batch: int) -> None:
        require(
            self.size >= global_batch,
            f"data.size={self.size} is smaller than one global batch ({global_batch}); "
            "raise data.size or lower batch.",
        )

    def survey(self) -> DataFound:
        return DataFound(train_size=self.size, held_out_size=self.eval_size)


def _check_fraction(fraction: float) -> None:
    require(
        0 < fraction < 1,
        f"data.eval_fraction={fraction} must be between 0 and 1, e.g. 0.2.",
    )


def digits_arrays(fraction: float) -> tuple[Any, Any, Any, Any]:
    """scikit-learn's digits split into (train images, held-out images, train labels,
    held-out labels), holding out ``fraction``: the same split for every job."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    return train_test_split(
        digits.images,
        digits.target,
        test_size=fraction,
        stratify=digits.target,
        random_state=SPLIT_SEED,
    )


@dataclass
class DigitsData(LoadedData):
    """``data=digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images; no
    download), upsampled to the model's input size, with a fixed stratified held-out split: a
    small real data set that runs anywhere (``python run.py data=digits eval.every_steps=50
    epochs=5``)."""

    name: str = "digits"
    _target_: str = "linkbench.parts.datasets.Digits"
    image_size: int = II("model.image_size")
    num_workers: int = 0
    """In memory already."""
    eval_fraction: float = 0.2
    """The share held out (360 images, the same for every job)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_fraction(self.eval_fraction)

    def survey(self) -> DataFound:
        train, held_out, _, _ = digits_arrays(self.eval_fraction)
        return DataFound(train_size=len(train), held_out_size=len(held_out))


@dataclass
class RootedData(LoadedData):
    """A data set read from ``data.root``."""

    root: str | None = MISSING

    def survey(self) -> DataFound:
        require(
            bool(self.root),
            f"data.root is not set; data={self.name} reads from it: add data.root=/path/to/data.",
        )
        self.check_root()
        require(
            not self.path.is_dir() or os.access(self.path, os.R_OK | os.X_OK),
            f"data.root={self.root} cannot be read by this user; fix its permissions or copy it.",
        )
        return self.found()

    def check_root(self) -> None:
        """Refuse a ``data.root`` that holds no data of this option's kind."""

    def found(self) -> DataFound:
        """What the readable ``data.root`` holds."""
        return DataFound()

    @property
    def path(self) -> Path:
        assert self.root is not None  # checked by survey()
        return Path(self.root).expanduser()


@dataclass
class ImageFolderData(RootedData):
    """``data=imagefolder``: an ImageNet-style directory, ``data.root/<class>/<image>`` (or
    ``data.root/train/<class>/<image>``); held out: ``data.root/val`` where it exists, else a
    seeded ``data.eval_fraction`` of the images. Its classes are its class folders."""

    name: str = "imagefolder"
    _target_: str = "linkbench.parts.datasets.ImageFolder"
    image_size: int = II("model.image_size")
    num_workers: int = 8
    eval_fraction: float = 0.2
    """Without val/: the share held out (a fixed, seeded split)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_fraction(self.eval_fraction)

    def check_root(self) -> None:
        require(
            self.path.is_dir(),
            f"data.root={self.root} is not a directory; point it at an ImageNet-style folder "
            "(one subfolder per class).",
        )

    @property
    def train_root(self) -> Path:
        return self.path / "train" if (self.path / "train").is_dir() else self.path

    @property
    def has_val(self) -> bool:
        return (self.path / "val").is_dir()

    def found(self) -> DataFound:
        """Its classes as torchvision's ImageFolder finds them, the folders under its
        training root (none is refused), and its files."""
        classes = classes_of(self.train_root)
        require(
            len(classes) > 0,
            f"data.root={self.root} holds no class folders; point it at an ImageNet-style "
            "folder (data.root/<class>/<image>, or data.root/train/<class>/<image>).",
        )
        splits = {"train": self.train_root, **({"val": self.path / "val"} if self.has_val else {})}
        found = {"train": classes} | {n: classes_of(f) for n, f in splits.items() if n != "train"}
        problem = image_folder_problem(f"data.root={self.root}", splits, found)
        require(problem is None, str(problem))
        count = sum(len(images) for images in classes.values())
        train = count if self.has_val else count - max(1, round(count * self.eval_fraction))
        return DataFound(train_size=train, classes=len(classes))


@dataclass
class Cifar10Data(RootedData):
    """``data=cifar10``: torchvision's CIFAR10 from ``data.root`` (its training and test
    splits); downloads only with ``data.download=true``."""

    name: str = "cifar10"
    _target_: str = "linkbench.parts.datasets.Cifar10"
    image_size: int = II("model.image_size")
    num_workers: int = 4
    download: bool = False

    def check_root(self) -> None:
        require(
            self.download or (self.path / "cifar-10-batches-py").is_dir(),
            f"data.root={self.root} holds no cifar-10-batches-py folder; point data.root at "
            "the folder that holds it, or add data.download=true.",
        )

    def found(self) -> DataFound:
        """Its sizes, once its batch files are there and a sample of each split reads."""
        folder = self.path / "cifar-10-batches-py"
        if folder.is_dir():  # else data.download=true fetches it on rank 0
            problem = cifar_problem(f"data.root={self.root}", folder)
            require(problem is None, str(problem))
        return DataFound(train_size=CIFAR10_TRAIN, held_out_size=CIFAR10_TEST)


DATA: dict[str, type[DataConfig]] = {
    "synthetic": SyntheticData,
    "digits": DigitsData,
    "fake": FakeData,
    "imagefolder": ImageFolderData,
    "cifar10": Cifar10Data,
}
# Keys every data option had before each had its own: a plain config (a rerun.yaml written
# then) may still carry them for an option that has none of them, where they did nothing.
FORMER_KEYS = ("root", "download", "size", "num_workers", "eval_size", "eval_fraction")
