"""Rank 0's TensorBoard writer: the job's time series and its config and hardware as text.

The log directory is the job's output directory, so ``tensorboard --logdir`` on a sweep
directory shows one run per job. Rank 0 writes the step series during the job (the first
repeat only); the launching process adds the job's final record when it ends
(:mod:`linkbench.launcher.hparams`).
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter

from linkbench.config.plan import RunPlan


def as_markdown_code(text: str) -> str:
    """Indent text so TensorBoard's markdown shows it verbatim."""
    return "\n".join("    " + line for line in text.splitlines())


def hardware_markdown(hardware: dict[str, Any]) -> str:
    """The hardware record as TensorBoard text: versions, GPUs, NVLink pairs, nvidia-smi topo."""
    parts = [as_markdown_code(OmegaConf.to_yaml(OmegaConf.create(hardware["versions"])))]
    topology = hardware["topology"]
    if not topology.get("available"):
        parts.append(f"GPU topology: {topology.get('reason')}")
    else:
        parts.append(f"driver {topology['driver']}, CUDA driver {topology['cuda_driver']}")
        parts += [
            f"* rank {g['local_rank']}: {g['name']}, {g['memory_total_bytes'] / 1e9:.0f} GB, "
            f"bus {g['bus_id']}, {g['nvlinks_active']} NVLinks active"
            for g in topology["gpus"]
        ]
        parts += [
            f"* ranks {p['ranks'][0]}-{p['ranks'][1]}: "
            f"{'NVLink' if p['nvlink'] else 'no NVLink'}, PCIe path {p['pcie_path']}"
            for p in topology["pairs"]
        ]
    if hardware.get("nvidia_smi_topo"):
        parts.append(as_markdown_code(hardware["nvidia_smi_topo"]))
    parts += [f"**WARNING**: {w}" for w in hardware["warnings"]]
    return "\n\n".join(parts)


class Board:
    """Rank 0's TensorBoard writer for one job; silent for repeats after the first."""

    def __init__(self, plan: RunPlan) -> None:
        self.writer = None
        if plan.repeat > 0:
            return
        # A job run again finds only the earlier events it continues from (the launcher
        # trimmed them: linkbench.launcher.board_files).
        self.writer = SummaryWriter(log_dir=plan.job_dir, flush_secs=30)
        config_yaml = OmegaConf.to_yaml(plan.plain_config)
        self.writer.add_text("config", as_markdown_code(config_yaml))
        self.writer.add_text("overrides", as_markdown_code("\n".join(plan.overrides) or "(none)"))
        self.writer.flush()

    def hardware(self, hardware: dict[str, Any]) -> None:
        """The hardware record as TensorBoard text."""
        if self.writer is not None:
            self.writer.add_text("hardware", hardware_markdown(hardware))

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is None:
            return
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
