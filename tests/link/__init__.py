"""Shared by the emulated links' tests: what a prediction promises, asserted one way."""

from __future__ import annotations

from linkbench.analysis.emulated import HOLDS, LinkRow


def assert_holds_what_it_states(row: LinkRow) -> None:
    """A prediction stated as a point (its inputs held still) lies within HOLDS of the step
    measured; one stated as an interval (its inputs moved, or spread beyond HOLDS) holds the
    step within that interval widened by HOLDS."""
    measured = row.step_ms.mean
    if row.moved or row.beyond:
        low, high = row.span_ms()
        assert low * (1 - HOLDS) <= measured <= high * (1 + HOLDS), (row, low, high)
    else:
        assert abs(row.error) <= HOLDS, row
