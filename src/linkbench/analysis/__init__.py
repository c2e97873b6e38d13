"""Runs anywhere, on the files jobs leave: sweep summaries, plots, comparisons, projections.

Data path: config -> launcher -> worker -> files -> **analysis**.
"""
