"""Every communication hook option, and the NVTX wrapper around any of them, registers with
DDP and trains a step (one gloo rank in this process)."""

from __future__ import annotations

import pytest
import torch

from linkbench.config.machine import Machine
from linkbench.launcher.planning import plan_job
from linkbench.parts.ddp import wrap

from ..conftest import CONF

HOOKS = sorted(p.stem for p in (CONF / "strategy" / "comm_hook").glob("*.yaml"))


@pytest.mark.parametrize("nvtx", [False, True], ids=["plain", "nvtx"])
@pytest.mark.parametrize("hook", HOOKS)
def test_every_comm_hook_trains_a_step(compose_config, tmp_path, one_rank_world, hook, nvtx):
    overrides = [f"strategy/comm_hook={hook}"]
    config = plan_job(compose_config(overrides), str(tmp_path), [], Machine(0)).config
    torch.manual_seed(0)
    model = wrap(torch.nn.Linear(8, 2), config.strategy, torch.device("cpu"), nvtx)
    before = model.module.weight.detach().clone()
    wire = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(hook)
    for _ in range(3):  # powersgd compresses from its second step on
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                if wire is not None:  # the gradient went over the wire in 16 bits
                    assert torch.equal(p.grad, p.grad.to(wire).float())
                p -= 0.1 * p.grad
                p.grad = None
    assert not torch.equal(before, model.module.weight)
    hook_name = model._get_ddp_logging_data().get("comm_hook", "")
    target = config.strategy.comm_hook.hook
    expected = target["_target_"].rsplit(".", 1)[-1] if target else ""
    assert expected in hook_name and bool(hook_name) == bool(expected or nvtx), hook_name
    if nvtx:
        assert hook_name.startswith("nvtx(")
