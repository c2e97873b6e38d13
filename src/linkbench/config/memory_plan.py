"""The plan's rough estimate of a rank's memory against what it has: a GPU's memory, or its
share of the host's after what the launcher and each rank hold to start. A warning where a
rank may be killed out of memory; a refusal where the host cannot hold the job at all."""

from __future__ import annotations

from linkbench.config.checks import require
from linkbench.config.machine import Machine
from linkbench.config.runtime import PartsFacts
from linkbench.config.schema import Config

# Measured on the CPU machine (torch 2.14.1 CPU, 2026-12-07, /proc/<pid>/smaps_rollup of the
# default job): the launcher and the workers' forkserver hold 0.38 + 0.14 GB of anonymous
# memory (torch imported; the file-backed rest the kernel can drop), a rank 0.04 GB of its
# own beyond what it shares with the forkserver. Rounded up: what a job holds before any
# batch, which no rank can use.
LAUNCHER_BYTES = 550_000_000
RANK_START_BYTES = 60_000_000


def memory_note(
    facts: PartsFacts, config: Config, device_type: str, ranks_here: int, machine: Machine
) -> str | None:
    """A warning when the rough estimate of a rank's memory exceeds what it has: a GPU's
    memory, or its share of the host's (the ranks of a CPU job share it, after what the
    launcher and each rank hold to start). Refused where the host cannot hold the ranks
    even before a batch (each one's start and its weights, gradients and optimizer state),
    or one rank's estimate exceeds all the host lets the job use."""
    per_sample = (facts.memory_bytes_per_rank - facts.fixed_memory_bytes) / config.batch
    if device_type == "cuda":
        have, where = machine.gpu_memory_bytes, "of its GPU's memory"
    elif not machine.memory_bytes:  # not known: no figure, no warning
        return None
    else:
        room = machine.memory_bytes - LAUNCHER_BYTES
        least = RANK_START_BYTES + facts.fixed_memory_bytes  # a rank before any batch
        launcher_gb = LAUNCHER_BYTES / 1e9
        beside = f"this machine lets the job use beside its launcher's {launcher_gb:.2f} GB"
        if least * ranks_here > room:
            fit = max(0, room) // least
            require(
                False,
                f"devices={ranks_here}: {ranks_here} ranks need about "
                f"{least * ranks_here / 1e9:,.1f} GB before any batch (each about "
                f"{RANK_START_BYTES / 1e9:.2f} GB to start and {facts.fixed_memory_bytes / 1e9:.2f}"
                f" GB of weights, gradients and optimizer state), more than the "
                f"{max(0, room) / 1e9:.1f} GB {beside}; "
                + (f"use devices={fit} or fewer." if fit else "use a smaller model."),
            )
        have = room // max(1, ranks_here) - RANK_START_BYTES
        where = (
            f"a rank has here ({ranks_here} ranks share {machine.memory_bytes / 1e9:.1f} GB, "
            f"{(LAUNCHER_BYTES + ranks_here * RANK_START_BYTES) / 1e9:.1f} GB of it held by "
            "the processes themselves)"
        )
        if facts.memory_bytes_per_rank + RANK_START_BYTES > room:
            require(
                False,
                f"batch={config.batch} with model={config.model.name}: a rough estimate puts "
                f"one rank at {facts.memory_bytes_per_rank / 1e9:.1f} GB, more than all the "
                f"{room / 1e9:.1f} GB {beside}, so not even one rank would fit; "
                + _fix(have, facts.fixed_memory_bytes, per_sample),
            )
    if not have or facts.memory_bytes_per_rank <= have:
        return None
    return (
        f"batch={config.batch} with model={config.model.name}: a rough estimate puts each rank "
        f"at {facts.memory_bytes_per_rank / 1e9:.1f} GB (weights, gradients and optimizer "
        f"state {facts.fixed_memory_bytes / 1e9:.2f} GB, the rest activations), more than the "
        f"{have / 1e9:.1f} GB {where}; a rank may be killed out of memory: "
        + _fix(have, facts.fixed_memory_bytes, per_sample)
    )


def _fix(have: float, fixed: int, per_sample: float) -> str:
    """What to lower where a rank has ``have`` bytes: the batch that might fit, or the model."""
    fits = int((have - fixed) // per_sample) if per_sample > 0 else 0
    return f"lower batch (about {fits} might fit)." if fits > 0 else "use a smaller model."
