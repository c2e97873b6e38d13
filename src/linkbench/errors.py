"""The errors a user meets: bad input (before any worker starts), a failed job, a stopped one.

All subclass Hydra's ``CompactHydraException``, which Hydra reports as the message alone
(no traceback) with exit status 1.
"""

from hydra.errors import CompactHydraException


class ConfigError(CompactHydraException):
    """A job's configuration cannot run; the message names the key and the fix."""


class JobFailed(CompactHydraException):
    """A job's workers failed; its result.json says what was measured before they did."""


class JobInterrupted(CompactHydraException):
    """The job was stopped (SIGTERM); its result.json says ``interrupted``."""
