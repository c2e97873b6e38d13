"""``profile=trace``: torch.profiler traces of a few steps after the timed ones, on every rank.

The profiler records CPU activity, and CUDA activity on a GPU (shapes and stacks off unless
``profile.record_shapes`` / ``profile.with_stack``), for ``profile.steps`` training steps
after one warm-up step, so the measured throughput is never taken with the profiler on. Each
rank writes ``<job>/traces/rank<N>.json.gz`` in Chrome's trace format (Perfetto and
chrome://tracing open it); :mod:`linkbench.analysis.trace` reads them. Only the job's first
run writes traces.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, schedule

from linkbench.config.choices import ProfileName
from linkbench.config.plan import RunPlan
from linkbench.files import trace_path
from linkbench.parts.rank import Rank
from linkbench.worker.stepper import Stepper

WARMUP_STEPS = 1  # the profiler's own start-up, not recorded
KINETO_QUIET = 6  # above every level Kineto prints at (ERROR is 3, its stage marks 4-5)


def record_trace(stepper: Stepper, plan: RunPlan, me: Rank) -> Path | None:
    """Profile ``profile.steps`` more steps on this rank; returns the trace's path."""
    options = plan.config.profile
    if options.name != ProfileName.trace or plan.repeat > 0:
        return None
    path = trace_path(Path(plan.job_dir), me.rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] if options.cpu or me.device.type == "cpu" else []
    if me.device.type == "cpu":
        # Kineto looks for GPUs when a trace starts and prints an ERROR where there are none
        # ("gpuGetDeviceCount failed with code 35"), and its USDT start/stop marks: nothing
        # is wrong, so on CPU it stays quiet unless the user set its level.
        os.environ.setdefault("KINETO_LOG_LEVEL", str(KINETO_QUIET))
    if me.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize(me.device)
    extra: dict[str, Any] = {}
    if plan.config.debug.comm_delay_ms and me.device.type == "cpu":
        # The injected delay sleeps in a thread of its own, which the profiler records only
        # when asked to record every thread.
        extra["experimental_config"] = _ExperimentalConfig(profile_all_threads=True)
    dist.barrier()  # every rank profiles the same steps
    with profile(
        **extra,
        activities=activities,
        schedule=schedule(wait=0, warmup=WARMUP_STEPS, active=options.steps, repeat=1),
        record_shapes=options.record_shapes,
        with_stack=options.with_stack,
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
    ) as profiler:
        for step in range(WARMUP_STEPS + options.steps):
            stepper.synced()
            if me.device.type == "cuda" and step in (
                WARMUP_STEPS - 1,
                WARMUP_STEPS + options.steps - 1,
            ):
                # The host runs ahead of the GPU inside the traced steps, as in the timed ones;
                # it waits only before the first and after the last, so every traced kernel
                # runs while the profiler records.
                torch.cuda.synchronize(me.device)
            profiler.step()
    return path
