"""The errors a user meets: bad input (before any worker starts), a failed job, a stopped one.

All subclass Hydra's ``CompactHydraException``, which Hydra reports as the message alone
(no traceback) with exit status 1, as it does for the jobs of a sweep. Where the error ends
the process (bad input: :func:`refuse`, status 2; a single job that failed or was stopped:
:func:`end`), it is its sentence alone, without Hydra's lines around it; ``HYDRA_FULL_ERROR=1``
keeps the traceback.
"""

import os
import sys
from typing import NoReturn

from hydra.errors import CompactHydraException

REFUSED = 2  # the exit status of bad input


class ConfigError(CompactHydraException):
    """A job's configuration cannot run; the message names the key and the fix."""


class JobFailed(CompactHydraException):
    """A job's workers failed; its result.json says what was measured before they did."""


class DiskFull(JobFailed):
    """The job's directory filled up; its sentence names the directory and the bytes free."""


class JobInterrupted(CompactHydraException):
    """The job was stopped (SIGTERM); its result.json says ``interrupted``."""


def end(error: Exception, status: int, said: bool = False) -> NoReturn:
    """End the process with ``error``'s sentence alone on stderr (unless the log ``said`` it
    already) and exit ``status``; with ``HYDRA_FULL_ERROR=1`` the error is raised on,
    traceback and all."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise error
    if not said:
        print(str(error), file=sys.stderr, flush=True)
    raise SystemExit(status)


def refuse(error: Exception) -> NoReturn:
    """End the process on bad input: its sentence alone, exit status 2."""
    end(error, REFUSED)
