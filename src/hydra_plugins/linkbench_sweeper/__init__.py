"""linkbench's Hydra sweeper (see :mod:`linkbench.launcher.sweeper`)."""
