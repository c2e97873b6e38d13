"""The parallel layout: every rank has one place, tensor-parallel ranks are neighbours, and
each data-parallel replica's loss is counted once."""

from __future__ import annotations

import itertools

import pytest

from linkbench.config.layout import Layout, fits


def _layouts(up_to: int = 8):
    for world, tensor, pipeline in itertools.product(range(1, up_to + 1), repeat=3):
        if fits(world, tensor, pipeline):
            yield Layout(world, tensor, pipeline)


@pytest.mark.parametrize("layout", list(_layouts()), ids=str)
def test_every_rank_has_its_own_place_in_the_layout(layout):
    places = [
        (layout.pipeline_rank(r), layout.data_rank(r), layout.tensor_rank(r))
        for r in range(layout.world_size)
    ]
    assert sorted(places) == list(
        itertools.product(range(layout.pipeline), range(layout.data), range(layout.tensor))
    )
    assert layout.data * layout.tensor * layout.pipeline == layout.world_size
    # One replica's tensor-parallel ranks are consecutive (one node, the fastest link).
    for first in range(0, layout.world_size, layout.tensor):
        group = range(first, first + layout.tensor)
        assert len({(layout.pipeline_rank(r), layout.data_rank(r)) for r in group}) == 1
    # Each replica's loss is held by exactly one rank.
    holders = [layout.data_rank(r) for r in range(layout.world_size) if layout.holds_loss(r)]
    assert sorted(holders) == list(range(layout.data))


def test_a_data_parallel_world_is_one_replica_per_rank():
    layout = Layout(4)
    assert layout.describe() == {"data": 4, "tensor": 1, "pipeline": 1}
    assert [layout.data_rank(r) for r in range(4)] == [0, 1, 2, 3]


def test_sizes_that_do_not_divide_the_world_are_no_layout():
    assert not fits(6, 4, 1) and not fits(4, 0, 1)
    with pytest.raises(ValueError):
        Layout(6, 4)
