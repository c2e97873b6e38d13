"""Strategies: which modules FSDP shards, what each strategy's collectives move per step, and
FSDP's compute-only step (one gloo rank in this process; two ranks in the CLI tests)."""

from __future__ import annotations

import pytest
import torch
import torchvision

from linkbench.config.machine import Machine
from linkbench.parts.models import GPT, TinyCNN
from linkbench.parts.strategy import blocks, parallelize

from ..conftest import job_plan


def test_fsdp_shards_the_repeated_blocks_a_model_is_made_of():
    gpt = GPT(vocab_size=64, seq_len=8, n_layer=3, n_head=2, d_model=16)
    assert blocks(gpt, []) == list(gpt.blocks)
    resnet = torchvision.models.resnet18(num_classes=10)
    found = blocks(resnet, [])
    assert len(found) == 8 and {type(b).__name__ for b in found} == {"BasicBlock"}
    assert blocks(TinyCNN(10), []) == []  # its layers are all different: the root alone
    assert blocks(resnet, ["Linear"]) == [resnet.fc]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ([], {"all_reduce": 4}),
        (["strategy/comm_hook=bf16"], {"all_reduce": 2}),
        (["strategy=zero1"], {"all_reduce": 4, "broadcast": 4}),
        (["strategy=fsdp"], {"all_gather": 8, "reduce_scatter": 4}),
        (
            ["strategy=fsdp", "strategy.reshard_after_forward=false"],
            {"all_gather": 4, "reduce_scatter": 4},
        ),
        (
            ["strategy=fsdp", "strategy.param_dtype=bfloat16"],
            {"all_gather": 4, "reduce_scatter": 2},
        ),
    ],
)
def test_bytes_per_step_of_each_strategys_collectives(
    compose_config, tmp_path, one_rank_world, overrides, expected
):
    """In bytes per parameter: fp32 parameters are 4 bytes, 16-bit ones 2."""
    plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
    config = plan.config
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    params = sum(p.numel() for p in model.parameters())
    moved = parallelize(plan.runtime, model, config, torch.device("cpu")).comm_bytes(config)
    assert moved == {op: per_param * params for op, per_param in expected.items()}


def test_fsdps_compute_only_step_keeps_parameters_gathered(
    compose_config, tmp_path, one_rank_world
):
    plan = job_plan(compose_config(["strategy=fsdp"]), str(tmp_path), [], Machine(0))
    config = plan.config
    gpt = GPT(vocab_size=32, seq_len=4, n_layer=2, n_head=2, d_model=8)
    fsdp = parallelize(plan.runtime, gpt, config, torch.device("cpu"))
    tokens = torch.zeros(2, 4, dtype=torch.long)
    with fsdp.without_gradient_sync():
        fsdp.model(tokens).sum().backward()
        assert not gpt.blocks[0]._get_fsdp_state()._fsdp_param_group.is_sharded
    fsdp.model(tokens).sum().backward()  # synced again: sharded after its backward
    assert gpt.blocks[0]._get_fsdp_state()._fsdp_param_group.is_sharded


def test_zero1s_compute_only_step_updates_without_broadcasting(
    compose_config, tmp_path, one_rank_world, monkeypatch
):
    """The probe's compute-only step leaves out every collective of ZeRO-1, the parameter
    broadcast after the optimizer step included; the synced step still broadcasts."""
    import torch.distributed as dist

    plan = job_plan(compose_config(["strategy=zero1"]), str(tmp_path), [], Machine(0))
    config = plan.config
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    zero = parallelize(plan.runtime, model, config, torch.device("cpu"))
    optimizer = zero.build_optimizer(config, 0.1, torch.device("cpu"), grad_scaler=False)
    broadcasts = []
    real = dist.broadcast
    monkeypatch.setattr(dist, "broadcast", lambda *a, **k: broadcasts.append(1) or real(*a, **k))

    def step() -> None:
        zero.model(torch.ones(4, 8)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    before = model[0].weight.detach().clone()
    with zero.without_gradient_sync(optimizer):
        step()
    assert broadcasts == [] and not torch.equal(model[0].weight, before)  # it did update
    step()
    assert broadcasts
