"""The sweeper's defaults (``hydra/sweeper=rounds``), with no imports: Hydra imports the
sweeper plugin on every compose, only to register it, and registering needs no more."""

AUTO = "auto"
"""``repeats=auto``: adaptive rounds."""
DEFAULT_MAX_ROUNDS = 8
DEFAULT_MIN_ROUNDS = 3
DEFAULT_MAX_JOBS = 200
DEFAULT_SPENDING = "obrien_fleming"

SUBDIR_RESOLVER = "linkbench_subdir"
"""``${linkbench_subdir:${hydra.job.override_dirname}}``, a sweep's job directory name
(conf/config.yaml's ``hydra.sweep.subdir``): :func:`job_subdir`."""


def job_subdir(override_dirname: str) -> str:
    """A job's directory name from its overrides: Hydra's ``override_dirname`` with each
    ``/`` written ``%2F`` (and ``%`` written ``%25``, so names stay apart), since Hydra keeps
    the ``/`` of a path (``data.root=/data/imagenet``) or a nested group
    (``strategy/comm_hook=bf16``), which would put the job three directories down, where
    the sweep's summary does not look (Hydra issue #3018)."""
    return override_dirname.replace("%", "%25").replace("/", "%2F")
