"""One Hydra job from start to result.json: plan, launch, record.

Called by ``run.py`` once per job (a sweep calls it once per combination, in one process).
Every outcome leaves a ``result.json`` in the job's directory (:class:`JobRecord`), with
``status`` "completed", "failed" or "interrupted", so a failed job loses nothing that was
measured before it failed. After the workers end, the NCCL logs they wrote are parsed to
verify the transport.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

from linkbench.analysis.phases import job_line
from linkbench.config.machine import Machine
from linkbench.config.overrides import JobOverrides, override_texts
from linkbench.config.plan import JobPlan, RunPlan
from linkbench.config.runtime import TaskRuntime
from linkbench.errors import ConfigError, DiskFull, JobFailed, JobInterrupted, end, refuse
from linkbench.files import (
    METRICS_FILE,
    NCCL_LOGS,
    RANK_LOGS,
    RERUN_FILE,
    RESULT_FILE,
    rank_log,
    replace_atomically,
    write_json,
)
from linkbench.launcher import interrupt, stopping
from linkbench.launcher.board_files import keep_earlier_events
from linkbench.launcher.conditions import snapshot
from linkbench.launcher.failures import first_failure, first_recorded_failure, ran_out_of_space
from linkbench.launcher.forkserver import start as start_forkserver
from linkbench.launcher.launch import check_outside_launch, export_slurm_world, launch
from linkbench.launcher.memory import MemoryWatch
from linkbench.launcher.parts_check import check_parts
from linkbench.launcher.planning import plan_job
from linkbench.launcher.progress import ProgressBar, console_is_terminal
from linkbench.launcher.record import JobRecord
from linkbench.link.nccl_bytes import predict as predict_nccl
from linkbench.link.nccl_log import parse_files, requested_vs_used
from linkbench.link.netns import LinkError, Network, new_spec
from linkbench.link.transport import verify, verify_link
from linkbench.result import JobResult, UnknownLayout, read_result
from linkbench.stop import Stopped, stops_held
from linkbench.worker.main import worker_main
from linkbench.worker.runtime import runtime_of

log = logging.getLogger("linkbench")
# A full disk must not turn every later log line into a "--- Logging error ---" traceback
# (a handler that cannot flush to the job's run.log): the job and the sweep say it once.
logging.raiseExceptions = False


def _failure_message(
    error: ChildFailedError, plan: RunPlan, memory: MemoryWatch
) -> tuple[int, str]:
    """The rank that failed first, and a message naming it, its error and its log, then the
    exit codes of the other ranks the launcher saw fail. A rank killed from outside is said
    with what the memory watch saw of it."""
    rank, reason = first_failure(
        error.failures, plan.log_dir, plan.world_size, ended_at=time.time()
    )
    if reason.startswith(("killed by SIGKILL", "it ended without recording")):
        pid = getattr(error.failures.get(rank), "pid", None)
        reason += f": {memory.killed_note(pid, plan.config.batch)}"
    message = f"rank {rank} failed first: {reason} [log: {rank_log(plan.log_dir, rank, 'stderr')}]"
    others = [r for r in sorted(error.failures) if r != rank]
    if others:
        exits = ", ".join(f"rank {r} exit code {error.failures[r].exitcode}" for r in others)
        message += f"; then {exits}"
    return rank, message


def check_transport(plan: RunPlan, link: dict[str, Any] | None = None) -> dict[str, Any]:
    """Verify the transport from the NCCL logs the workers left (NCCL_DEBUG_FILE or stdout)
    and, on an emulated link, from the workers' own sockets and the link's counters."""
    summary = parse_files(_nccl_files(plan)) if plan.backend == "nccl" else None
    arm = plan.config.interconnect
    expected = str(arm.expected_transport)
    transport = verify(summary, expected, plan.backend, plan.world_size)
    if link is not None:
        transport = verify_link(link, transport)
    if transport["verified"] is False:
        log.warning(
            "!!! TRANSPORT NOT VERIFIED: interconnect=%s expects %s, but %s",
            arm.name, expected, transport["reason"],
        )  # fmt: skip
    elif transport["verified"]:
        log.info("transport verified: %s", transport["reason"])
    else:
        log.info("transport %s, not verified: %s", transport["transport"], transport["reason"])
    for ignored in requested_vs_used(summary or {}, plan.config.nccl.variables()):
        log.warning("!!! %s", ignored)
    return transport


def _nccl_files(plan: RunPlan) -> list[Path]:
    """The NCCL logs the workers left: NCCL_DEBUG_FILE's, else the ranks' stdout."""
    return sorted(plan.log_dir.glob(NCCL_LOGS)) or sorted(plan.log_dir.glob(RANK_LOGS))


def _nccl_lines(plan: RunPlan) -> Iterator[str]:
    """Every line of the NCCL logs the workers left, one rank's file after another."""
    for path in _nccl_files(plan):
        with open(path, errors="replace") as file:
            yield from file


def nccl_uplinks(plan: RunPlan, per_step: dict[str, Any]) -> dict[str, float]:
    """An emulated cluster on NCCL: each uplink's bytes predicted from the rings, trees and
    per-call choices in NCCL's own log (:mod:`linkbench.link.nccl_bytes`), set beside what
    its counters saw; the busiest's, and the bytes that stay inside a node, as metrics (none,
    and a reason, where not modelled)."""
    spec = plan.link
    if spec is None or "calls" not in per_step:
        return {}
    return predict_nccl(per_step, _nccl_lines(plan), spec.ranks, spec.node_count)


def write_rerun_config(plan: JobPlan, job_dir: Path) -> None:
    """rerun.yaml: the resolved config with this machine's choices pinned (devices, backend),
    for ``python run.py --config-path <job> --config-name rerun``."""
    header = f"# Rerun this job: python run.py --config-path {job_dir} --config-name rerun\n"
    body = OmegaConf.to_yaml(OmegaConf.create(plan.resolved_config()))
    replace_atomically(job_dir / RERUN_FILE, lambda tmp: tmp.write_text(header + body))


def timing_overheads(
    timeline: dict[str, float], launched_at: float, returned_at: float
) -> dict[str, float]:
    """What a run spent outside its task (process start, rendezvous, set-up, teardown), and
    from its launch to the end of its first training step, in seconds (wall clock)."""
    out = {}
    if "task_started_at" in timeline:
        task_s = timeline["task_ended_at"] - timeline["task_started_at"]
        out["overhead_s"] = (returned_at - launched_at) - task_s
    if "first_step_done_at" in timeline:
        out["launch_to_first_step_s"] = timeline["first_step_done_at"] - launched_at
    return out


def _run_repeats(
    plan: JobPlan, record: JobRecord, job_started_at: float, memory: MemoryWatch
) -> None:
    """Launch the job's world ``repeats`` times, collecting metrics and transport checks.

    The first run's first training step is also timed from the job's start
    (``time_to_first_step_s``, after Hydra composed the config) and stamped with the wall
    clock (``first_step_done_at``, seconds since the epoch) for tools timing the command."""
    c = plan.config
    repeats = c.job_runs
    for repeat in range(repeats):
        run = record.current_run()
        which = f", run {repeat + 1}/{repeats}" if repeats > 1 else ""
        if c.round is not None:
            of = f"/{c.repeats}" if isinstance(c.repeats, int) else " (adaptive)"
            which = f", round {c.round + 1}{of}"
        if plan.task_spec.trains and not c.eval.enabled and not c.data.learnable:
            which += (
                f", no held-out evaluation (data={c.data.name}: its labels cannot be learnt; "
                "eval.enabled=true evaluates)"
            )
        log.info(
            "job %s: %s on %d %s worker(s), backend %s, interconnect %s%s",
            plan.job_dir, c.task.name, plan.world_size, plan.device_type, plan.backend,
            c.interconnect.name, which,
        )  # fmt: skip
        (Path(plan.job_dir) / METRICS_FILE).unlink(missing_ok=True)
        started = snapshot()
        record.launching()
        launched_at = time.time()
        bar = console_is_terminal() and not plan.in_place
        returns: dict[int, Any] = {}
        with emulated_network(run) as (run, network), memory:
            try:
                with ProgressBar(run, enabled=bar):
                    returns = launch(run, show_rank0=not bar)
                returned_at = time.time()
            finally:
                link = None
                if network is not None:
                    link = {**(returns.get(0) or {}).get("link", {}), "uplinks": _counters(network)}
                record.add_transport(check_transport(run, link))
        record.add_conditions({"start": started, "end": snapshot()})
        returned = dict(returns[0])
        if link is not None:
            returned["link"] = link
            if warning := link.get("rate_warning"):
                log.warning("!!! %s", warning)  # the bar may have hidden rank 0's line
        metrics = returned.pop("metrics")
        if link and "measured_busbw_gb_s" in link:
            metrics["link_busbw_gb_s"] = link["measured_busbw_gb_s"]
        if link and "node_busbw_gb_s" in link:
            metrics["node_busbw_gb_s"] = link["node_busbw_gb_s"]
        if link and plan.backend == "nccl" and "per_step" in link:
            metrics.update(nccl_uplinks(run, link["per_step"]))
        timeline = returned.pop("timeline", {})
        record.returned([tuple(m) for m in timeline.pop("phases", [])], launched_at, returned_at)
        metrics.update(timing_overheads(timeline, launched_at, time.time()))
        if repeat == 0 and "first_step_done_at" in timeline:
            returned["first_step_done_at"] = timeline["first_step_done_at"]
            returned["time_to_first_step_s"] = timeline["first_step_done_at"] - job_started_at
        record.add_run(metrics, returned)


def _counters(network: Network) -> list[dict[str, Any]]:
    """The link's counters; none (and a warning) if they cannot be read: a run that ended
    badly keeps its own error."""
    try:
        return network.counters()
    except LinkError as error:
        log.warning("could not read the emulated link's counters: %s", error)
        return []


@contextlib.contextmanager
def emulated_network(plan: RunPlan) -> Iterator[tuple[RunPlan, Network | None]]:
    """interconnect=emulated: a fresh network for the run, removed when it ends in any way;
    yields the run's plan with its link, and the network (None for other arms)."""
    arm = plan.config.interconnect.link()
    if arm is None:
        yield plan, None
        return
    spec = new_spec(arm.rate_gbit_s, arm.delay_ms, arm.jitter_ms, plan.nproc_per_node, arm.nodes,
                    dict(enumerate(arm.uplink_rates_gbit_s)))  # fmt: skip
    with Network(spec) as network:
        for line in network.stale:
            log.warning("removed what a killed job left on this host: %s", line)
        yield dataclasses.replace(plan, link=spec), network


def _plan_job(
    cfg: DictConfig,
    job_dir: Path,
    overrides: JobOverrides,
    machine: Machine,
    sweep_dir: str | None,
) -> JobPlan:
    plan = plan_job(cfg, job_dir, overrides, machine, check_parts, sweep_dir, runtime_of)
    if plan.resume_step is not None:
        log.info("resume: %s continues from its checkpoint of step %d", job_dir, plan.resume_step)
    return plan


def _run_other_rank(
    cfg: DictConfig, job_dir: Path, overrides: JobOverrides, machine: Machine
) -> float:
    """A rank other than 0 under an outside launcher: train, write nothing of the job's."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
        root.removeHandler(handler)  # rank 0 alone writes the job's log file
    # rank 0 checked the parts
    worker_main(plan_job(cfg, job_dir, overrides, machine, runtime_of=runtime_of).run())
    return 0.0


def _unswept(hydra_cfg: Any) -> list[str]:
    """A sweep the config defines (an experiment's hydra.sweeper.params) runs only with -m:
    say so when it was run without."""
    params = hydra_cfg.sweeper.get("params") or {}
    if hydra_cfg.mode != RunMode.RUN or not params:
        return []
    return [
        f"this config defines a sweep (hydra.sweeper.params: {', '.join(params)}) that runs "
        "only with -m; this runs one job with the values the config sets: add -m to run the "
        "sweep."
    ]


def _auto_choices(hydra_cfg: Any, plan: JobPlan) -> dict[str, str]:
    """What ``model=auto`` and ``precision=auto`` chose on this machine (logged once)."""
    chosen = {"model": plan.config.model.name, "precision": str(plan.config.precision.name)}
    auto = {g: name for g, name in chosen.items() if hydra_cfg.runtime.choices.get(g) == "auto"}
    if auto:
        device = "GPUs" if plan.device_type == "cuda" else "no GPU"
        shown = " and ".join(f"{g}=auto is {name}" for g, name in auto.items())
        log.info("%s on a machine with %s; choose another with %s=...", shown, device,
                 "=..., ".join(auto))  # fmt: skip
    return auto


def _completed_result(job_dir: Path) -> JobResult | None:
    try:
        previous = read_result(job_dir)
    except UnknownLayout as error:
        raise ConfigError(str(error)) from None
    return previous if previous and previous.get("status") == "completed" else None


def run_job(cfg: DictConfig) -> float:
    """Plan, launch (``repeats`` times) and record one job; returns its headline metric.

    Under torchrun or a SLURM job of several tasks, this process is one rank of the world:
    global rank 0 runs and records the job, the other ranks only train."""
    hydra_cfg = HydraConfig.get()
    job_dir = Path(hydra_cfg.runtime.output_dir)
    export_slurm_world()
    machine = Machine.current()
    overrides = JobOverrides.of(override_texts(hydra_cfg.overrides.task))  # parsed once, carried
    if machine.outside is not None:
        check_outside_launch(hydra_cfg, dict(machine.environ))
        if machine.outside.rank != 0:
            return _run_other_rank(cfg, job_dir, overrides, machine)
    else:
        start_forkserver()  # run.py started it already: its imports run beside the plan's
    if cfg.get("resume") and (previous := _completed_result(job_dir)):
        headline = previous.get("headline", "samples_per_sec")
        value = float(previous["metrics"].get(headline, 0.0))
        log.info("resume: %s already completed (%s %.1f); skipping it", job_dir, headline, value)
        return value
    stub = _hydra_stub(job_dir, hydra_cfg)  # what Hydra made for this job, if nothing else
    record = JobRecord(job_dir, overrides, in_sweep=hydra_cfg.mode == RunMode.MULTIRUN)
    memory = MemoryWatch()  # what the ranks held, for a rank the kernel kills
    job_started_at = time.time()
    full = False  # the job's directory filled up
    refused = False  # bad input, said before anything ran
    stopped_by: str | None = None  # the signal that stopped this job of a sweep
    try:
        sweep_dir = str(hydra_cfg.sweep.dir) if hydra_cfg.mode == RunMode.MULTIRUN else None
        plan = _plan_job(cfg, job_dir, overrides, machine, sweep_dir)
        plan.runtime.data.fetch(plan.config.data)  # once, before any worker
        plan.notes.extend(_unswept(hydra_cfg))
        record.planned(plan)
        record.fields["auto"] = _auto_choices(hydra_cfg, plan)
        write_rerun_config(plan, job_dir)
        keep_earlier_events(job_dir, plan.resume_step)  # one TensorBoard curve per job
        for note in plan.notes:
            log.warning(note)
        _run_repeats(plan, record, job_started_at, memory)
        record.complete()
    except ConfigError as error:
        record.fail(str(error))
        if hydra_cfg.mode == RunMode.RUN:
            refused = True  # before it began: no record, and no folder of Hydra's left
            _remove(stub)
            refuse(error)  # its sentence alone (a sweep's jobs were checked before it began)
        raise
    except ChildFailedError as error:
        run = record.current_run()
        rank, message = _failure_message(error, run, memory)
        record.fail(message, rank)
        if ran_out_of_space(run.log_dir, run.world_size):
            full = True  # said, with what was kept, once the record is written below
            return 0.0  # not reached: _out_of_space ends the job
        log.error("job failed: %s", message)
        failed = JobFailed(f"{job_dir}: {message}")
        if hydra_cfg.mode == RunMode.RUN:
            end(failed, 1, said=True)  # the line above, without Hydra's around it
        raise failed from None
    except (KeyboardInterrupt, SignalException, Stopped) as error:
        interrupt.taken()
        record.interrupt(f"interrupted ({type(error).__name__}: {error})")
        name = _signal_name(error)
        if hydra_cfg.mode == RunMode.MULTIRUN:
            stopped_by = name  # the sweep stops after this job, once it is recorded
        if isinstance(error, SignalException):
            stopped = JobInterrupted(f"{job_dir}: stopped by {name}, with its workers")
            if hydra_cfg.mode == RunMode.RUN:
                end(stopped, 128 + signal.Signals[name].value)
            raise stopped from None
        if hydra_cfg.mode == RunMode.RUN:  # stopped before its workers (planning, set-up)
            end(JobInterrupted(f"{job_dir}: stopped by {name}"), 128 + signal.Signals[name].value)
        raise
    except Exception as error:
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            record.fail(f"no space left in {job_dir}: {error.strerror}")
            full = True  # said, with what was kept, once the record is written below
            return 0.0  # not reached: _out_of_space ends the job
        record.fail(f"{type(error).__name__}: {error}")
        if record.plan is not None and record.plan.in_place:
            # This rank's task failed, perhaps after another rank's.
            run = record.current_run()
            rank, message = first_recorded_failure(run.log_dir, run.world_size) or (
                0,
                record.fields["error"],
            )
            record.fail(message, rank)
            log.error("job failed: rank %d failed first: %s", rank, message)
            raise JobFailed(f"{job_dir}: rank {rank}: {message}") from None
        raise  # the launcher itself failed (rendezvous, ...): the record keeps the error
    finally:
        try:
            # A second stop signal (a job of submitit's gets the terminal's Ctrl-C and then the
            # sweep's SIGTERM) must not cut the record short: it is what the stop keeps.
            with stops_held():
                if not refused:
                    record.write()
        except OSError as error:
            if error.errno != errno.ENOSPC:
                raise
            full = True
        if stopped_by is not None:
            stopping.request(stopped_by)  # from now on, a second signal ends the process
        if full:
            _out_of_space(job_dir, record, hydra_cfg.mode)
    assert record.plan is not None  # planned, or the ConfigError above was raised
    return report(record.fields, record.plan.runtime.task)


def _hydra_stub(job_dir: Path, hydra_cfg: Any) -> list[Path]:
    """The files Hydra made for a job in a directory that held nothing before (its .hydra
    folder and its log), so that a job refused before it began leaves no folder behind; []
    when the directory holds anything else (an earlier job's, resumed)."""
    made = [job_dir / ".hydra", job_dir / f"{hydra_cfg.job.name}.log"]
    if not job_dir.is_dir() or set(job_dir.iterdir()) - set(made):
        return []
    return [*made, job_dir]


def _remove(stub: list[Path]) -> None:
    for path in stub:
        if path.is_dir() and path.name == ".hydra":
            shutil.rmtree(path, ignore_errors=True)
        elif path.is_dir():
            with contextlib.suppress(OSError):
                path.rmdir()  # only if empty
        else:
            path.unlink(missing_ok=True)


def _out_of_space(job_dir: Path, record: JobRecord, mode: RunMode | None) -> None:
    """The job's directory filled up while its records were written: keep result.json if it
    fits now (the failed writes left no temporary file), else print what was measured; end
    with one sentence naming the directory and the bytes."""
    text = json.dumps(record.fields, indent=2, default=str)
    try:
        write_json(job_dir / RESULT_FILE, record.fields)
        kept = f"{RESULT_FILE} was kept"
    except OSError:
        print(f"what was measured (no room for {RESULT_FILE}):\n{text}", flush=True)
        kept = (
            f"{RESULT_FILE} ({len(text):,} bytes) did not fit either: what was measured is "
            "printed above"
        )
    free = shutil.disk_usage(job_dir).free
    full = DiskFull(
        f"{job_dir} filled up ({free:,} bytes free); {kept}; free space there or choose "
        "another hydra.run.dir or hydra.sweep.dir."
    )
    if mode == RunMode.RUN:
        end(full, 1)
    raise full


def _signal_name(error: BaseException) -> str:
    """The signal behind a stop: elastic's SignalException carries it; Ctrl-C is SIGINT."""
    sigval = getattr(error, "sigval", None)  # missing when raised without one
    if isinstance(sigval, int):
        return signal.Signals(sigval).name
    return "SIGINT" if isinstance(error, KeyboardInterrupt) else "SIGTERM"


def report(result: JobResult, task: type[TaskRuntime]) -> float:
    """Log the job's outcome in the task's lines and where its time went; return its
    headline metric (for Hydra)."""
    task.report(result)
    if "phases_s" in result:
        log.info("time: %s", job_line(result["phases_s"], result["duration_s"]))
    return float(result["metrics"].get(result["headline"], 0.0))
