"""TensorBoard: rank 0's time series and texts, and the launching process's job summary.

The log directory of both is the job's output directory, so ``tensorboard --logdir`` on a
sweep directory shows one run per job. Rank 0 writes the step series during the job (the
first repeat only). When the job ends, the launching process writes, once, the final metrics
(``final/*``: medians over repeats), every repeat's headline (``repeats/*``), the HParams
summaries and a custom-scalars layout. The hparams summaries go into the run's own event file
(``SummaryWriter.add_hparams`` would make a timestamped sub-run) with the same hparam keys and
metric tags in every job of a sweep, as the HParams dashboard reads its columns from one run.
"""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from torch.utils.tensorboard import SummaryWriter
from torch.utils.tensorboard.summary import hparams

from linkbench.plan import JobPlan
from linkbench.results import override_values

# result.json metric -> final/ tag; one list for every task, so every job of any sweep
# declares the same HParams metric columns.
FINAL_METRICS = {
    "samples_per_sec": "final/samples_per_sec",
    "samples_per_sec_per_device": "final/samples_per_sec_per_device",
    "step_time_ms": "final/step_time_ms",
    "mfu": "final/mfu",
    "comm_exposed_ms": "final/comm_exposed_ms",
    "comm_fraction": "final/comm_fraction",
    "busbw_gbps_peak": "final/busbw_gbps_peak",
    "final_loss": "final/loss",
}
METRIC_TAGS = tuple(FINAL_METRICS.values())
CUSTOM_SCALARS = {
    "throughput": {
        "samples/s (global)": ["Multiline", ["perf/samples_per_sec$"]],
        "samples/s per device": ["Multiline", ["perf/samples_per_sec_per_device"]],
        "model FLOPs utilisation": ["Multiline", ["perf/mfu"]],
        "all_reduce busbw GB/s by log2(bytes)": ["Multiline", ["collectives/all_reduce/busbw"]],
    },
    "step time": {"ms/step": ["Multiline", ["perf/step_time_ms", "perf/compute_step_ms"]]},
    "communication": {
        "exposed ms": ["Multiline", ["perf/comm_exposed_ms"]],
        "fraction of step": ["Multiline", ["perf/comm_fraction"]],
    },
}


def hparams_of(plan: JobPlan) -> dict[str, Any]:
    """The keys the job's overrides set, then the fixed set every job logs."""
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
    ordered = {**override_values(plan.overrides), **values}
    return {k: "none" if v is None else v for k, v in ordered.items()}


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

    def __init__(self, plan: JobPlan, hardware: dict[str, Any] | None = None) -> None:
        self.writer = None
        if plan.repeat > 0:
            return
        # A resumed job drops the events its killed run wrote after its checkpoint.
        purge = plan.resume_step + 1 if plan.resume_step is not None else None
        self.writer = SummaryWriter(log_dir=plan.job_dir, flush_secs=30, purge_step=purge)
        config_yaml = OmegaConf.to_yaml(OmegaConf.create(plan.config))
        self.writer.add_text("config", as_markdown_code(config_yaml))
        self.writer.add_text("overrides", as_markdown_code("\n".join(plan.overrides) or "(none)"))
        if hardware is not None:
            self.writer.add_text("hardware", hardware_markdown(hardware))
        self.writer.flush()

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if self.writer is None:
            return
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _edit_plugin_data(summary: Any, edit: Any) -> None:
    """Apply ``edit`` to the HParamsPluginData inside one of torch's hparams summaries."""
    value = summary.value[0]
    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
    edit(data)
    value.metadata.plugin_data.content = data.SerializeToString()


def write_job_summary(
    plan: JobPlan,
    metrics: dict[str, Any],
    repeat_metrics: list[dict[str, Any]],
    completed: bool,
    swept: set[str],
) -> None:
    """The launching process's once-per-job record: hparams (``swept`` keys marked as the
    ones that differ, the session failed unless ``completed``), final/* and repeats/* scalars."""
    experiment, start, end = hparams(hparams_of(plan), dict.fromkeys(METRIC_TAGS, 0.0))

    def mark_differs(data: Any) -> None:
        for info in data.experiment.hparam_infos:
            info.differs = info.name in swept

    def mark_status(data: Any) -> None:
        data.session_end_info.status = (
            api_pb2.STATUS_SUCCESS if completed else api_pb2.STATUS_FAILURE
        )

    _edit_plugin_data(experiment, mark_differs)
    _edit_plugin_data(end, mark_status)
    writer = SummaryWriter(log_dir=plan.job_dir)
    try:
        for summary in (experiment, start, end):
            writer.file_writer.add_summary(summary)
        writer.add_custom_scalars(CUSTOM_SCALARS)
        for key, tag in FINAL_METRICS.items():
            if isinstance(metrics.get(key), (int, float)):
                writer.add_scalar(tag, metrics[key], 0)
        for repeat, values in enumerate(repeat_metrics):
            for key in ("samples_per_sec", "step_time_ms", "busbw_gbps_peak"):
                if isinstance(values.get(key), (int, float)):
                    writer.add_scalar(f"repeats/{key}", values[key], repeat)
    finally:
        writer.close()
