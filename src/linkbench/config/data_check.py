"""What the plan reads of a data set on disk before any rank starts, so that data the ranks
would find bad is one sentence instead of a traceback on every rank: an image folder's
classes and a sample image of each split, CIFAR-10's batch files and their MD5s. Without
torch (the plan's survey runs in the launcher): PIL and hashlib, as torchvision's own
readers use them."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

# torchvision.datasets.folder.IMG_EXTENSIONS (torchvision 0.29), compared lower-case as its
# has_file_allowed_extension does.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
# torchvision.datasets.CIFAR10.train_list + test_list (torchvision 0.29): each batch file's
# MD5, which its _check_integrity compares before it reads a file.
CIFAR_MD5 = {
    "data_batch_1": "c99cafc152244af753f735de768cd75f",
    "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
    "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
    "data_batch_4": "634d18415352ddfa80567beed471001a",
    "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
    "test_batch": "40351d587109b95175f43aff81a1287e",
}


def is_image(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_EXTENSIONS and path.is_file()


def classes_of(split: Path) -> dict[str, list[Path]]:
    """A split's class folders -> their image files (sorted, as torchvision sorts them)."""
    return {
        folder.name: sorted(p for p in folder.rglob("*") if is_image(p))
        for folder in sorted(p for p in split.iterdir() if p.is_dir())
    }


def image_folder_problem(
    key: str, splits: dict[str, Path], found: dict[str, dict[str, list[Path]]]
) -> str | None:
    """Why an image folder's splits (name -> folder, and their :func:`classes_of` in
    ``found``) cannot be read as torchvision's ImageFolder reads them, or None: a class
    folder without images (ImageFolder refuses it), held-out classes that are not the
    training ones (their labels would mean other classes), or a sample image of a split
    (its first) that does not open."""
    from PIL import Image, UnidentifiedImageError

    for name, classes in found.items():
        empty = [c for c, images in classes.items() if not images]
        if empty:
            shown = ", ".join(empty[:3]) + (f" and {len(empty) - 3} more" if len(empty) > 3 else "")
            return (
                f"{key}: the {name} split's class folder(s) {shown} in {splits[name]} hold no "
                f"image ({', '.join(IMAGE_EXTENSIONS)}); add images or remove the folders."
            )
    if "val" in found and set(found["val"]) != set(found["train"]):
        only = sorted(set(found["val"]) ^ set(found["train"]))[:3]
        return (
            f"{key}: val/ and the training folder have different classes ({', '.join(only)} "
            "in one only), so a held-out label would name another class; give both the same "
            "class folders."
        )
    for name, classes in found.items():
        sample = next(iter(classes.values()))[0]
        try:
            with Image.open(sample) as image:
                image.verify()
        except (OSError, UnidentifiedImageError, SyntaxError) as error:
            return (
                f"{key}: {sample} (the {name} split's first image) does not open as an image "
                f"({type(error).__name__}: {error}); replace or remove it."
            )
    return None


def cifar_problem(key: str, folder: Path) -> str | None:
    """Why ``cifar-10-batches-py`` cannot be read as torchvision's CIFAR10 reads it, or
    None: a batch file missing, or one whose MD5 is not the published one (torchvision's
    CIFAR10 checks the same and refuses the folder on every rank)."""
    missing = [n for n in CIFAR_MD5 if not (folder / n).is_file()]
    if missing:
        return (
            f"{key}: {folder} lacks {', '.join(missing)}; download CIFAR-10 again "
            "(data.download=true into an empty data.root)."
        )
    for name, expected in CIFAR_MD5.items():
        stat = (folder / name).stat()
        found = _md5(folder / name, stat.st_size, stat.st_mtime_ns)
        if found != expected:
            return (
                f"{key}: {folder / name} is not CIFAR-10's {name} (its MD5 is "
                f"{found}, the published one {expected}: damaged, cut short or "
                "another file); download CIFAR-10 again (data.download=true into an empty "
                "data.root)."
            )
    return None


@functools.lru_cache(maxsize=64)
def _md5(path: Path, size: int, mtime_ns: int) -> str:
    """A file's MD5, read once per process while its size and modification time stay (a
    sweep plans every configuration, then each job, in one launcher: 180 MB read once)."""
    digest = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
