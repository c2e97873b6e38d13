"""The plan's check of a training job's parts, by building them where that is cheap, in the
launching process: the loss, the communication hook and the optimizer resolved (the
optimizer built over one CPU parameter), and the model built on the meta device, which also
counts its training FLOPs per sample (for MFU) and estimates what a rank will hold in memory
(:mod:`linkbench.parts.memory`). A bad name or keyword is one sentence before
any worker starts, not a traceback from a rank.

It needs torch, which the plan must not import: the launcher and the sweeper hand
:func:`check_parts` to :func:`linkbench.config.plan.make_plan` (its ``parts_check``), which
calls it once and carries the count in the plan it returns.
"""

from __future__ import annotations

import importlib

import torch

from linkbench.config.runtime import PartsFacts
from linkbench.config.schema import Config
from linkbench.config.targets import hydra_lookups_quiet
from linkbench.errors import ConfigError
from linkbench.parts.flops import train_flops_per_sample
from linkbench.parts.memory import MemoryEstimate, estimate_memory
from linkbench.parts.models import loss_function
from linkbench.parts.optim import optimizer_class


def _cause(error: Exception) -> str:
    """The error behind ``error`` (Hydra wraps an import's or a constructor's own), as one
    line: its type and message."""
    cause = error.__cause__ or error
    return f"{type(cause).__name__}: {cause}".replace("\n", " ")


# What the model's check found, per model, input and optimizer state in this process: a
# sweep plans every configuration before its first job, and each job (every round) again,
# and its configurations mostly differ in what the model's build does not read (the batch,
# the link).
_MODELS: dict[str, tuple[int, MemoryEstimate]] = {}


def check_parts(c: Config, lr: float) -> PartsFacts:
    """Refuse (ConfigError, one sentence) a training job whose loss, hook, optimizer or
    model cannot be built; the training FLOPs of one sample, and what one rank holds in
    memory at the job's batch (a rough estimate). The model is built once per model, input
    size and optimizer state in this process."""
    states = _check_others(c, lr)
    key = repr((c.model, c.data.image_size, c.data.num_classes, states))
    if (found := _MODELS.get(key)) is None:
        found = _MODELS[key] = _check_model(c, states)
    flops, memory = found
    return PartsFacts(flops, memory.at(c.batch), memory.fixed_bytes)


def _check_others(c: Config, lr: float) -> int:
    """The loss, the hook and the optimizer, each built or refused in one sentence; the
    optimizer's state tensors per weight."""
    try:
        with hydra_lookups_quiet():
            loss_function(c.model)
    except Exception as error:
        raise ConfigError(
            f"model.loss={c.model.loss} cannot be imported ({_cause(error)}); name a function "
            "loss(outputs, targets), e.g. linkbench.parts.models.cross_entropy."
        ) from None
    hook = c.strategy.hook()
    parts = (("hook", hook.hook), ("state", hook.state)) if hook is not None else ()
    for part, spec in parts:
        target = (spec or {}).get("_target_")
        try:
            if target is not None:
                module, _, name = str(target).rpartition(".")
                getattr(importlib.import_module(module), name)
        except Exception as error:
            raise ConfigError(
                f"strategy.comm_hook.{part}._target_={target} cannot be imported "
                f"({_cause(error)}); name a {'function' if part == 'hook' else 'class'} by its "
                "dotted path, e.g. those of conf/strategy/comm_hook/powersgd.yaml."
            ) from None
    try:
        with hydra_lookups_quiet():
            cls, kwargs = optimizer_class(
                c.optimizer, lr, c.model.weight_decay, torch.device("cpu"), grad_scaler=False
            )
        probe = torch.nn.Parameter(torch.zeros(1))
        optimizer = cls([probe], **kwargs)
        probe.grad = torch.zeros(1)
        optimizer.step()  # makes its state: what it holds per weight
        return sum(
            torch.is_tensor(v) and v.shape == probe.shape for v in optimizer.state[probe].values()
        )
    except Exception as error:
        raise ConfigError(
            f"optimizer={c.optimizer.name} ({c.optimizer._target_} with optimizer.kwargs="
            f"{dict(c.optimizer.kwargs)}) cannot be built: {_cause(error)}; fix "
            "optimizer._target_ or optimizer.kwargs."
        ) from None


def _check_model(c: Config, states: int) -> tuple[int, MemoryEstimate]:
    """The model built on the meta device: its training FLOPs per sample and its memory
    estimate, or one sentence."""
    try:
        flops = train_flops_per_sample(c.model, c.data.image_size, c.data.num_classes)
        return flops, estimate_memory(c.model, c.data.image_size, c.data.num_classes, states)
    except Exception as error:
        raise ConfigError(
            f"model={c.model.name} ({c.model._target_} with model.kwargs) cannot be built for "
            f"data.image_size={c.data.image_size}: {_cause(error)}; fix model._target_ or "
            "model.kwargs."
        ) from None
