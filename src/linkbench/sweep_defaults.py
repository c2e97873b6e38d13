"""The sweeper's defaults (``hydra/sweeper=rounds``), with no imports: Hydra imports the
sweeper plugin on every compose, only to register it, and registering needs no more."""

AUTO = "auto"
"""``repeats=auto``: adaptive rounds."""
DEFAULT_MAX_ROUNDS = 8
DEFAULT_MIN_ROUNDS = 3
DEFAULT_MAX_JOBS = 200
DEFAULT_SPENDING = "obrien_fleming"
