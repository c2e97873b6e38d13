"""The pieces of a convergence study: the learning-rate schedule, the digits data set and
its held-out split, held-out shards that cover the split once, budgets in epochs."""

from __future__ import annotations

import math

import pytest
import torch

from linkbench.config.choices import Decay
from linkbench.config.machine import Machine
from linkbench.config.scaling import LrSchedule
from linkbench.errors import ConfigError
from linkbench.parts.data import held_out_batches
from linkbench.parts.rank import Rank

from ..conftest import job_plan

CPU = torch.device("cpu")


def test_goyals_gradual_warmup_then_step_decay():
    s = LrSchedule(warmup_steps=4, start=0.25, total_steps=100, decay=Decay.step,
                   decay_at=(0.5, 0.75), decay_factor=0.1)  # fmt: skip
    assert [s.factor(i) for i in range(5)] == pytest.approx([0.25, 0.4375, 0.625, 0.8125, 1.0])
    assert s.factor(49) == 1.0 and s.factor(50) == pytest.approx(0.1)
    assert s.factor(75) == pytest.approx(0.01)
    zero = LrSchedule(warmup_steps=4, total_steps=10)
    assert [zero.factor(i) for i in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cosine = LrSchedule(warmup_steps=0, total_steps=10, decay=Decay.cosine)
    assert cosine.factor(0) == 1.0 and cosine.factor(5) == pytest.approx(0.5)
    assert cosine.factor(10) == pytest.approx(0.0, abs=1e-12)  # reaches zero after the run


def test_the_plan_turns_epochs_into_steps_and_warmup_epochs_into_steps(compose_config, tmp_path):
    overrides = ["data=digits", "epochs=3", "batch=16", "scaling.lr_warmup_epochs=1",
                 "scaling.warmup_from=base"]  # fmt: skip
    plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
    per_rank = 1437 // 2  # 1,797 digits, 20 % held out, 2 ranks
    assert plan.steps_per_epoch == per_rank // 16 == 44
    assert plan.config.steps == 3 * 44
    assert plan.schedule.warmup_steps == 44
    assert plan.schedule.start == pytest.approx(plan.config.base_lr / plan.lr)
    assert any("epochs=3.0 at global batch 32 makes 132 steps" in note for note in plan.notes)


@pytest.mark.parametrize(
    ("overrides", "plan_overrides", "words"),
    [
        (["data=digits", "epochs=2"], ["steps=50"], "epochs=2.0 and steps=50 both set"),
        (["epochs=2"], [], "data=synthetic has none"),
        (["epochs=2", "samples=100", "data=digits"], [], "both set a budget"),
        (
            ["data=fake", "data.eval_size=1", "data.size=64"],
            [],
            "fewer than the 2 data-parallel replicas",
        ),
        (["scaling.lr_warmup_epochs=1"], [], "needs data with a size"),
    ],
)
def test_bad_budgets_are_refused(compose_config, tmp_path, overrides, plan_overrides, words):
    with pytest.raises(ConfigError, match=words):
        job_plan(compose_config(overrides + plan_overrides), str(tmp_path), plan_overrides,
                  Machine(0))  # fmt: skip


def test_digits_are_upsampled_and_held_out_by_class(compose_config, tmp_path):
    plan = job_plan(
        compose_config(["data=digits", "data.image_size=16"]), str(tmp_path), [], Machine(0)
    )
    config = plan.config
    train = plan.runtime.data.dataset(config, local_rank=0)
    test = plan.runtime.data.dataset(config, local_rank=0, held_out=True)
    assert (len(train), len(test)) == (
        config.data.survey().train_size,
        config.data.survey().held_out_size,
    )
    assert len(train) + len(test) == 1797
    images, labels = test.tensors
    assert images.shape == (360, 3, 16, 16) and images.min() >= -1 and images.max() <= 1
    counts = torch.bincount(labels, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified: each class about 36 times


@pytest.mark.parametrize("data", ["synthetic", "digits"])
def test_held_out_shards_cover_the_split_once(compose_config, tmp_path, data):
    plan = job_plan(
        compose_config([f"data={data}", "data.image_size=8"]), str(tmp_path), [], Machine(0)
    )
    config = plan.config
    seen = [
        [(x.sum().item(), y.item()) for xs, ys in held_out_batches(plan, 7, Rank(r, r, 3, CPU))
         for x, y in zip(xs, ys, strict=True)]
        for r in range(3)
    ]  # fmt: skip
    total = config.data.survey().held_out_size
    assert sum(len(s) for s in seen) == total
    assert [len(s) for s in seen] == [math.ceil((total - r) / 3) for r in range(3)]
