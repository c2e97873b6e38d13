"""Runs in every worker process, one per rank: the process group, the training loop, timing.

Data path: config -> launcher -> **worker** -> files -> analysis.
"""
