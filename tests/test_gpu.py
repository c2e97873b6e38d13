"""GPU paths: NCCL on the visible GPUs. Run on a GPU machine with `pytest -m "gpu or multi_gpu"`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from linkbench.link.netns import emulation_problem

from .conftest import QUICK, load_result
from .conftest import run_cli as run_on_cpu

GPUS = torch.cuda.device_count()
needs_gpu = pytest.mark.skipif(GPUS < 1, reason="needs a CUDA GPU")
needs_two = pytest.mark.skipif(GPUS < 2, reason="needs two or more CUDA GPUs")


def run_cli(args: list[str], timeout: float = 240) -> subprocess.CompletedProcess:
    """`python run.py ARGS` on this machine's GPUs."""
    return run_on_cpu(args, timeout=timeout, gpus=True)


@pytest.mark.gpu
@needs_gpu
def test_default_job_uses_nccl_on_every_gpu(tmp_path):
    done = run_cli([*QUICK, f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    assert (result["backend"], result["device_type"], result["world_size"]) == (
        "nccl",
        "cuda",
        GPUS,
    )
    assert result["metrics"]["max_allocated_gb"] > 0
    # On GPUs the default model and precision are ones whose gradients make the link matter.
    assert (result["model"], result["precision"]) == ("resnet50", "bf16")
    assert result["auto"] == {"model": "resnet50", "precision": "bf16"}


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_every_precision_trains_on_gpu(tmp_path, precision):
    args = [f"precision={precision}", "model=resnet18", "data.image_size=64", *QUICK]
    done = run_cli([*args, "devices=1", f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    assert result["precision"] == precision
    assert result["metrics"]["final_loss"] == pytest.approx(result["metrics"]["final_loss"])


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("hook", ["bf16", "powersgd"])
def test_ddps_communication_hook_runs_under_nccl(tmp_path, hook):
    """strategy/comm_hook on the strategy's own node reaches DDP under NCCL: the record
    names it, and bf16's bytes on the wire are half the gradients' (PowerSGD's vary)."""
    args = [f"strategy/comm_hook={hook}", "model=resnet18", "data.image_size=64", *QUICK]
    done = run_cli([*args, "devices=1", "debug.comm_delay_ms=1", f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    assert "strategy/comm_hook" in result["settings"]
    metrics = result["metrics"]
    if hook == "bf16":
        assert metrics["comm_bytes_per_step"] == pytest.approx(metrics["grad_bytes"] / 2)
    else:
        assert "comm_bytes_per_step" not in metrics


@pytest.mark.gpu
@needs_gpu
def test_more_devices_than_gpus_is_refused(tmp_path):
    done = run_cli([f"devices={GPUS + 1}", f"hydra.run.dir={tmp_path}"], timeout=60)
    assert done.returncode != 0
    assert f"devices={GPUS + 1} but only {GPUS} CUDA GPU" in done.stderr


@pytest.mark.multi_gpu
@needs_two
def test_interconnect_sweep_on_two_gpus(tmp_path):
    args = ["-m", "repeats=1", "interconnect=nvlink,pcie,socket", "devices=2", *QUICK]
    done = run_cli([*args, f"hydra.sweep.dir={tmp_path}"], timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    for job in (p for p in tmp_path.iterdir() if p.is_dir() and "interconnect=" in p.name):
        result = load_result(job)
        assert result["status"] == "completed"
        assert result["world_size"] == 2
        assert result["worker_nccl_env"]["NCCL_P2P_DISABLE"] == result["env"]["NCCL_P2P_DISABLE"]


@pytest.mark.gpu
@needs_gpu
def test_nccl_logs_hardware_and_transport_are_recorded(tmp_path):
    done = run_cli(["interconnect=nvlink", *QUICK, "devices=1", f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    transport = result["transport"]
    nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
    assert transport["summary"]["version"].startswith(nccl)
    assert transport["verified"] is None and "one rank" in transport["reason"]
    assert (tmp_path / "logs" / "nccl.rank0.log").is_file()
    hardware = json.loads((tmp_path / "hardware.json").read_text())
    assert hardware["topology"]["available"] is True
    assert hardware["topology"]["gpus"][0]["name"] == torch.cuda.get_device_name(0)
    assert "compute_step_ms" not in result["metrics"], "one rank: no link, so no probe"


@pytest.mark.gpu
@needs_gpu
def test_allreduce_task_on_gpu_reaches_a_gibibyte(tmp_path):
    done = run_cli(["task=allreduce", "devices=1", f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    sizes = [r["bytes"] for r in result["collectives"] if r["op"] == "all_reduce"]
    assert sizes[0] == 1024 and sizes[-1] == 1 << 30


# What an emulated link needs of the host (root, iproute2): the GPU machine may lack it.
EMULATION = emulation_problem(delay=False)
needs_namespaces = pytest.mark.skipif(EMULATION is not None, reason=str(EMULATION))


@pytest.mark.gpu
@needs_gpu
@needs_namespaces
def test_one_nccl_rank_runs_in_its_namespace_on_an_emulated_link(tmp_path):
    """NCCL with one rank inside its namespace: the rendezvous on its emulated address, NCCL's
    sockets named to the link (no data moves between GPUs with one rank)."""
    args = ["interconnect=emulated", "devices=1", "task=allreduce", "task.max_bytes=1048576"]
    done = run_cli([*args, f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    assert result["backend"] == "nccl" and result["link"]["rate_gbit_s"] == 1.0
    assert result["worker_nccl_env"]["NCCL_SOCKET_IFNAME"].startswith("lb")
    assert result["worker_nccl_env"]["NCCL_NET"] == "Socket"


@pytest.mark.multi_gpu
@needs_two
@needs_namespaces
def test_nccl_crosses_the_emulated_link_at_its_rate(tmp_path):
    """Two GPUs, each rank in its namespace: NCCL's log shows only NET/Socket channels, the
    sockets run between emulated addresses, and the bus bandwidth is the link's."""
    args = ["interconnect=emulated", "interconnect.rate_gbit_s=1", "devices=2", "task=allreduce"]
    args += ["task.ops=[all_reduce]", "task.min_bytes=16777216", "task.max_bytes=33554432"]
    done = run_cli([*args, f"hydra.run.dir={tmp_path}"], timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    transport = result["transport"]
    assert transport["verified"] is True and "NET channel" in transport["reason"], transport
    top = max(result["collectives"], key=lambda row: row["bytes"])
    assert top["busbw_gb_s"] == pytest.approx(0.125 * 1448 / 1514, rel=0.10)


@pytest.mark.multi_gpu
@needs_two
@pytest.mark.parametrize("arm", ["nvlink", "pcie", "socket"])
def test_transport_is_verified_on_two_gpus(tmp_path, arm):
    done = run_cli([f"interconnect={arm}", "devices=2", *QUICK, f"hydra.run.dir={tmp_path}"])
    assert done.returncode == 0, done.stderr[-3000:]
    transport = load_result(tmp_path)["transport"]
    # nvlink is verified only where the GPUs really are NVLink-connected.
    hardware = json.loads((tmp_path / "hardware.json").read_text())
    linked = all(p["nvlink"] for p in hardware["topology"]["pairs"])
    assert transport["verified"] is (linked if arm == "nvlink" else True), transport


def _train_on_one_gpu(tmp_path: Path, name: str, args: list[str]) -> dict:
    job = tmp_path / name
    done = run_cli([*args, "devices=1", f"hydra.run.dir={job}"], timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    return load_result(job)


# 40 steps with the learning rate still warming up at the capture, so a graph that baked in
# the lr, accumulated its gradients or trained on stale inputs would end at another loss.
FAST_PATH_JOB = [
    "model=tiny",
    "steps=40",
    "untimed_steps=12",
    "log_every=4",
    "scaling.lr_warmup_steps=30",
    "base_lr=1.0",
]


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize(
    "mode",
    [["cuda_graphs=true"], ["compile=true"], ["compile=true", "precision=bf16"]],
    ids=["cuda_graphs", "compile", "compile_bf16"],
)
def test_fast_paths_train_like_eager(tmp_path, mode):
    precision = [a for a in mode if a.startswith("precision=")] or ["precision=fp32"]
    speed = [a for a in mode if not a.startswith("precision=")]
    eager = _train_on_one_gpu(tmp_path, "eager", [*FAST_PATH_JOB, *precision])
    fast = _train_on_one_gpu(tmp_path, "fast", [*FAST_PATH_JOB, *precision, *speed])
    assert (eager["model"], fast["model"]) == ("tiny", "tiny")
    assert fast["metrics"]["final_loss"] == pytest.approx(eager["metrics"]["final_loss"], rel=0.02)
    assert fast["metrics"]["final_loss"] < 2.2  # it learned (chance is ln 10 = 2.30)
    assert fast["metrics"]["first_step_s"] > 0
    # One rank: no link, so no probe (the probe on the fast paths: the multi-GPU tests).
    assert "compute_step_ms" not in fast["metrics"]


@pytest.mark.gpu
@needs_gpu
def test_cuda_graphs_replay_real_data_batches(tmp_path):
    args = [*FAST_PATH_JOB, "data=fake", "data.size=512", "cuda_graphs=true", "batch=16"]
    result = _train_on_one_gpu(tmp_path, "fake", args)
    assert result["status"] == "completed"
    assert result["metrics"]["samples_per_sec"] > 0


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("model", ["resnet18", "gpt"])
def test_mfu_is_reported_on_known_gpus(tmp_path, model):
    from linkbench.parts.flops import peak_tflops

    args = [f"model={model}", "precision=bf16", *QUICK]
    metrics = _train_on_one_gpu(tmp_path, model, args)["metrics"]
    assert metrics["flops_per_sample"] > 0
    if peak_tflops(torch.cuda.get_device_name(0), "bf16") is None:
        pytest.skip(f"{torch.cuda.get_device_name(0)} has no peak in linkbench.flops")
    assert 0 < metrics["mfu"] < 1


@pytest.mark.gpu
@needs_gpu
def test_resume_from_a_checkpoint_with_cuda_graphs(tmp_path):
    """The checkpoint restores a capturable optimizer (its lr a device tensor) before the
    resumed run's eager steps and capture."""
    job = [*FAST_PATH_JOB, "cuda_graphs=true", "checkpoint.every_steps=20"]
    whole = _train_on_one_gpu(tmp_path, "whole", job)
    crash = ["debug.crash_at_step=30", "devices=1", f"hydra.run.dir={tmp_path / 'r'}"]
    crashed = run_cli([*job, *crash])
    assert crashed.returncode != 0
    resumed = _train_on_one_gpu(tmp_path, "r", [*job, "resume=true"])
    assert resumed["metrics"]["resumed_from_step"] == 20
    assert resumed["metrics"]["final_loss"] == pytest.approx(
        whole["metrics"]["final_loss"], rel=0.01
    )


@pytest.mark.gpu
@needs_gpu
def test_a_traced_resnet50_job_has_kernels_an_overlap_figure_and_counters(tmp_path):
    args = ["model=resnet50", "precision=bf16", "batch=64", "data=fake", "data.size=2048",
            "data.num_workers=4", "steps=40", "untimed_steps=10", "log_every=10",
            "profile=trace", "devices=1", f"hydra.run.dir={tmp_path}"]  # fmt: skip
    done = run_cli(args, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(tmp_path)
    rank = result["trace"]["ranks"][0]
    assert rank["device"] == "cuda" and rank["compute_ms"] > 0 and rank["steps"] == 5
    hw = result["hw"]
    assert hw["available"], hw
    assert hw["gpu_util_pct_mean"] > 0 and hw["power_w_mean"] > 0
    assert hw["sm_clock_mhz_mean"] > 100 and hw["temperature_c_mean"] > 0
    # What the machine was doing at the run's start and end, from the launching process.
    start = result["conditions"][0]["start"]
    assert start["gpus"] and start["gpus"][0]["sm_clock_mhz"] > 0, start
    assert isinstance(start["gpus"][0]["clock_reasons"], list)
    # data=fake copies every batch from the host: PCIe carried bytes.
    assert hw.get("pcie_rx_bytes_per_step", 0) > 0 or hw.get("pcie_tx_gb_s_mean", 0) > 0
    witness = result["transport"]["hardware"]
    assert witness["witnessed"] is None  # one GPU: no traffic between GPUs to witness


# A GPU-bound step: the host runs ahead of the device, so every ms the device spends shows in
# the step. On an H200 resnet18 at 64 px is launch-bound (2.9 ms of kernels in an 18 ms step:
# the host's kernel launches set the pace): a delay there fills idle device time, which the
# trace counts as exposed and the step never shows. At 224 px the kernels fill the step.
GPU_BOUND = ["model=resnet18", "precision=bf16", "data=synthetic", "data.image_size=224",
             "batch=256", "steps=40", "untimed_steps=10", "log_every=10",
             "eval.enabled=false"]  # fmt: skip


@pytest.mark.gpu_timing
@needs_gpu
def test_step_delay_runs_on_the_gpu_and_reads_as_injected():
    """debug.step_delay_ms behind a full queue of GPU work, where a host sleep would hide:
    it lengthens the stream's time by what it says, within 10 %."""
    from linkbench.parts.delay import StepDelay

    device = torch.device("cuda", 0)
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)

    def queue_ms(delay: StepDelay | None) -> float:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            a @ a
            if delay is not None:
                delay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    delay = StepDelay(2.0, device)
    queue_ms(delay)  # warm: the clocks of a loaded GPU, which the training loop's
    torch.cuda.synchronize()  # logging steps then recalibrate the spin to
    delay.recalibrate()
    plain = min(queue_ms(None) for _ in range(5))
    delayed = min(queue_ms(delay) for _ in range(5))
    assert (delayed - plain) / 20 == pytest.approx(2.0, rel=0.1), (plain, delayed)


@pytest.mark.gpu_timing
@needs_gpu
def test_comm_delay_is_found_by_the_probe_and_the_trace(tmp_path):
    """Each bucket's collective waits 5 ms on its own stream: the exposed communication lies
    between 0 and the injected total, and the two methods agree."""
    args = [*GPU_BOUND, "debug.comm_delay_ms=5", "task.no_sync_steps=10", "profile=trace"]
    result = _train_on_one_gpu(tmp_path, "comm", args)
    metrics, trace = result["metrics"], result["trace"]["mean"]
    injected = metrics["comm_delay_injected_ms"]
    assert metrics["comm_delay_buckets"] >= 1
    probe, traced = metrics["comm_exposed_ms"], trace["exposed_comm_ms"]
    assert 0 < probe <= injected * 1.05, (metrics, trace)
    assert 0 < traced <= injected * 1.05, trace
    assert trace["comm_ms"] == pytest.approx(injected, rel=0.1)  # every delay kernel, found
    assert probe == pytest.approx(traced, rel=0.2), (metrics, trace)
    assert metrics["comm_exposed_ms_low"] > 0  # well above the probe's noise
    assert trace["untraced_step_ms"] == metrics["step_time_ms"]
    assert 0 < trace["stretch"] < 1.5, trace  # GPU-bound: the profiler's host cost mostly hidden
