"""The GPU counter sampler says why it has nothing on CPU, and the job's hw block combines
ranks; the full path runs on the GPU (tests/test_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from linkbench.worker.counters import CounterSampler, combine


def test_without_a_gpu_the_block_says_why_and_nothing_fails():
    sampler = CounterSampler(torch.device("cpu"), sample_hz=10)
    sampler.start()
    record = sampler.stop(steps=10)
    assert record == {"available": False, "reason": "no GPU: NVML counters need a CUDA device"}
    assert combine([record, record])["available"] is False


def test_sampling_off_is_said_so():
    record = CounterSampler(torch.device("cuda", 0), sample_hz=0).stop(steps=1)
    assert record["available"] is False and "hw_sample_hz=0" in record["reason"]


def test_combine_means_the_ranks_that_had_counters():
    ranks = [
        {"available": True, "power_w_mean": 300.0, "nvlink_tx_bytes_per_step": 1e8},
        {"available": True, "power_w_mean": 500.0, "nvlink_tx_bytes_per_step": 3e8},
        {"available": False, "reason": "NVML unavailable"},
    ]
    hw = combine(ranks)
    assert hw["power_w_mean"] == pytest.approx(400.0)
    assert hw["nvlink_tx_bytes_per_step"] == pytest.approx(2e8)
    assert hw["ranks"] == ranks
