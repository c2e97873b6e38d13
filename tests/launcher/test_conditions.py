"""The launcher reads the GPUs a job can see, as CUDA names them, not every GPU NVML lists."""

from __future__ import annotations

import pytest

from linkbench.launcher import conditions
from linkbench.launcher.conditions import visible_gpus

UUIDS = ["GPU-aaaa-1111", "GPU-bbbb-2222", "GPU-abcd-3333"]


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [(0, "0"), (1, "1"), (2, "2")]),  # unset: every GPU
        ("2,0", [(2, "2"), (0, "0")]),  # CUDA's order, not NVML's
        ("GPU-b", [(1, "GPU-b")]),  # a UUID prefix
        ("1,7,2", [(1, "1")]),  # CUDA stops at the first entry that names no GPU
        ("GPU-a", []),  # an ambiguous prefix names none
        ("MIG-x", []),
    ],
)
def test_visible_gpus_follow_cuda_visible_devices(visible, expected):
    assert visible_gpus(visible, len(UUIDS), UUIDS.__getitem__) == expected


def test_an_empty_cuda_visible_devices_reads_no_gpu_and_says_why(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    point = conditions.snapshot()
    assert point["gpus"] == [] and "CUDA_VISIBLE_DEVICES" in point["gpus_unavailable"]
    assert point["cpus"] >= 1 and 1 <= point["cpus_usable"] <= point["cpus"]
