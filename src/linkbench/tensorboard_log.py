"""What rank 0 writes to TensorBoard: scalars, the resolved config as text, and hparams.

The writer's log directory is the job's output directory, so ``tensorboard --logdir`` on a
sweep directory shows one run per job. The hparams summaries are written into the writer's own
event file (``SummaryWriter.add_hparams`` would make a timestamped sub-run), with the same
hparam keys and metric tags in every job, as the HParams dashboard reads its columns from one
run only.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from linkbench.plan import JobPlan

# One list for every task, so every job of any sweep declares the same metric columns.
METRIC_TAGS = (
    "perf/samples_per_sec",
    "perf/samples_per_sec_per_device",
    "perf/step_time_ms",
    "perf/comm_exposed_ms",
    "perf/comm_fraction",
    "perf/busbw_gbps_peak",
    "train/loss",
)


def hparams_of(plan: JobPlan) -> dict[str, Any]:
    """The fixed set of hparams every job logs (None becomes the string "none")."""
    c = plan.config
    values = {
        "task": c["task"]["name"],
        "backend": plan.backend,
        "interconnect": c["interconnect"]["name"],
        "precision": plan.precision,
        "scaling": c["scaling"]["rule"],
        "model": c["model"]["name"],
        "data": c["data"]["name"],
        "batch": c["batch"],
        "global_batch": plan.global_batch,
        "world_size": plan.world_size,
        "lr": plan.lr,
        "steps": c["steps"],
        "seed": c["seed"],
        "ddp.bucket_cap_mb": float(c["ddp"]["bucket_cap_mb"]),
        "ddp.comm_hook": c["ddp"]["comm_hook"],
        "ddp.static_graph": c["ddp"]["static_graph"],
        "ddp.gradient_as_bucket_view": c["ddp"]["gradient_as_bucket_view"],
    }
    return {k: "none" if v is None else v for k, v in values.items()}


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
    """Rank 0's TensorBoard writer for one job."""

    def __init__(self, plan: JobPlan, hardware: dict[str, Any] | None = None) -> None:
        self.writer = SummaryWriter(log_dir=plan.job_dir, flush_secs=30)
        config_yaml = OmegaConf.to_yaml(OmegaConf.create(plan.config))
        self.writer.add_text("config", as_markdown_code(config_yaml))
        self.writer.add_text("overrides", as_markdown_code("\n".join(plan.overrides) or "(none)"))
        if hardware is not None:
            self.writer.add_text("hardware", hardware_markdown(hardware))
        for summary in hparams(hparams_of(plan), dict.fromkeys(METRIC_TAGS, 0.0)):
            self.writer.file_writer.add_summary(summary)
        self.writer.flush()

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
