"""The sweeper's defaults (``hydra/sweeper=rounds``), importing only the standard library:
Hydra imports the sweeper plugin on every compose, only to register it, and registering
needs no more."""

import hashlib

AUTO = "auto"
"""``repeats=auto``: adaptive rounds."""
DEFAULT_MAX_ROUNDS = 8
DEFAULT_MIN_ROUNDS = 3
DEFAULT_MAX_JOBS = 200
DEFAULT_SPENDING = "obrien_fleming"

SUBDIR_RESOLVER = "linkbench_subdir"
"""``${linkbench_subdir:${hydra.job.override_dirname}}``, a sweep's job directory name
(conf/config.yaml's ``hydra.sweep.subdir``): :func:`job_subdir`."""


MAX_SUBDIR_BYTES = 200
"""The longest job directory name :func:`job_subdir` gives, in bytes of UTF-8: below the
255 of common file systems (ext4, xfs, NTFS), with room for a file name the
user's own ``hydra.sweep.subdir`` adds."""


def job_subdir(override_dirname: str) -> str:
    """A job's directory name from its overrides: Hydra's ``override_dirname`` with each
    ``/`` written ``%2F`` (and ``%`` written ``%25``, so names stay apart), since Hydra keeps
    the ``/`` of a path (``data.root=/data/imagenet``) or a nested group
    (``strategy/comm_hook=bf16``), which would put the job three directories down, where
    the sweep's summary does not look (Hydra issue #3018).

    A name longer than :data:`MAX_SUBDIR_BYTES` keeps its head and ends in ``~`` and 12 hex
    digits of the whole name's SHA-256, since a file system refuses a name over 255 bytes
    (the many overrides of one sweep) and the job's overrides are in its
    ``.hydra/overrides.yaml`` anyway."""
    name = override_dirname.replace("%", "%25").replace("/", "%2F")
    encoded = name.encode()
    if len(encoded) <= MAX_SUBDIR_BYTES:
        return name
    digest = hashlib.sha256(encoded).hexdigest()[:12]
    head = encoded[: MAX_SUBDIR_BYTES - len(digest) - 1].decode(errors="ignore")
    return f"{head}~{digest}"
