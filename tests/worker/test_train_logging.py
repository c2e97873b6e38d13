"""What a training job says while it runs."""

from __future__ import annotations

import logging

from linkbench.worker.train import _say_if_long


def test_a_long_job_says_after_its_first_step_how_long_it_will_take(caplog):
    """resnet50 at 224 px on 2 CPU cores: 29.7 s for step 1 of 50, log_every=10."""
    with caplog.at_level(logging.INFO, logger="linkbench"):
        _say_if_long(29.7, 1, 50, 10)
        _say_if_long(0.05, 1, 100, 10)  # 5 s in all: nothing to say
    assert len(caplog.records) == 1
    line = caplog.records[0].getMessage()
    assert "step 1/50 took 29.7 s" in line and "about 24 min" in line
    assert "the next line in 267 s" in line
