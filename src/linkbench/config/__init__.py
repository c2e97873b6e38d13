"""Runs in the launching process: the typed schema, its checks, and the job plan a worker gets.

Data path: **config** -> launcher -> worker -> files -> analysis.
"""
