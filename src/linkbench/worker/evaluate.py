"""Held-out evaluation: loss and top-1 accuracy over every rank's share of the held-out split.

Every rank runs the model in eval mode, without gradients and with the step's autocast,
with the training loss (``model.loss``, a mean over a batch's samples),
over its data-parallel replica's share (:func:`linkbench.parts.data.held_out_batches`:
every sample once, no padding duplicates); the summed loss, correct predictions and sample
count of the rank holding each replica's loss are all-reduced, so the figures are exact for
the whole split whatever the number of ranks and replicas. Evaluations run
between timing windows (at logging steps, and once after the last timed step), so their
time is never training time. For token models a "sample" is a token and top-1 accuracy is
next-token accuracy.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from linkbench.config.plan import JobPlan
from linkbench.parts import precision
from linkbench.parts.data import held_out_batches
from linkbench.parts.models import loss_function
from linkbench.parts.rank import Rank
from linkbench.worker.stepper import Stepper


def evaluate(stepper: Stepper, plan: JobPlan, me: Rank) -> dict[str, float]:
    """``eval_loss`` (mean per sample) and ``eval_accuracy`` (top-1) over the held-out split."""
    cfg = plan.config
    loss_fn = loss_function(cfg.model)
    module = stepper.parallel.module  # DDP's replicas agree; FSDP's root gathers its shards
    was_training = module.training
    module.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=me.device)  # loss sum, correct, count
    try:
        with torch.no_grad(), precision.autocast(plan.config.precision, me.device):
            for inputs, targets in held_out_batches(plan, cfg.eval.batch or cfg.batch, me):
                outputs = module(inputs)
                labels = targets.reshape(-1)
                # The training loss's mean over the batch's samples, weighted by their count.
                loss = loss_fn(outputs.float(), targets).double() * labels.numel()
                flat = outputs.reshape(-1, outputs.shape[-1])
                correct = (flat.argmax(dim=-1) == labels).sum()
                count = torch.tensor(labels.numel(), device=me.device)
                totals += torch.stack([loss, correct.double(), count.double()])
    finally:
        module.train(was_training)
    if not me.holds_loss:  # its replica's figures are counted by the rank that holds them
        totals.zero_()
    dist.all_reduce(totals)
    loss_sum, correct, count = totals.tolist()
    return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count, "eval_samples": count}
