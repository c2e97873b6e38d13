"""What docs/extending.md promises: a strategy, and a task with a metric of its own, from
outside the package are each one module and one YAML file, run end to end, and are checked
and judged like the built-in ones."""

from __future__ import annotations

import csv
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from linkbench.config.machine import Machine
from linkbench.errors import ConfigError
from linkbench.launcher.planning import plan_job

from .conftest import QUICK, clean_env, load_result, run_cli

PER_PARAMETER = '''
"""Every gradient all-reduced on its own as soon as it is accumulated: no buckets, no wrapper."""
import contextlib

import torch.distributed as dist

from linkbench.parts.strategy import Parallel, tensor_bytes


class PerParameter(Parallel):
    def __init__(self, model, config, device):
        self.module = self.model = model
        self.sync = True
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, 0)  # every rank starts from rank 0's weights, as in DDP
        for param in model.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self.reduce)

    def reduce(self, param):
        if self.sync:
            dist.all_reduce(param.grad)
            param.grad.div_(dist.get_world_size())

    @contextlib.contextmanager
    def without_gradient_sync(self, optimizer=None):
        self.sync = False
        try:
            yield
        finally:
            self.sync = True

    def comm_bytes(self, config):
        grads = (p for p in self.module.parameters() if p.requires_grad)
        return {"all_reduce": float(tensor_bytes(grads))}

    def message_bytes(self, config, op):
        return max(p.numel() * p.element_size() for p in self.module.parameters())
'''


def _outside(tmp_path, package: str, group: str, name: str, source: str, yaml: str):
    """An option of ``group`` from outside the package: its runtime class in the module
    ``<package>.<name>`` (``source``) under ``lab/``, and its YAML file in
    ``conf/<group>/<name>.yaml``; returns the --config-dir and an environment that finds the
    module."""
    folder = tmp_path / "lab" / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    (folder / f"{name}.py").write_text(source)
    conf = tmp_path / "conf" / group
    conf.mkdir(parents=True)
    (conf / f"{name}.yaml").write_text(yaml)
    return tmp_path / "conf", clean_env(python_path=tmp_path / "lab")


def _outside_strategy(tmp_path):
    yaml = "name: per_parameter\n_target_: my_strategies.per_parameter.PerParameter\n"
    return _outside(tmp_path, "my_strategies", "strategy", "per_parameter", PER_PARAMETER, yaml)


def test_a_strategy_from_outside_the_package_trains_like_ddp(tmp_path):
    conf, env = _outside_strategy(tmp_path)
    args = ["--config-dir", str(conf), *QUICK, "task.no_sync_steps=2", "eval.enabled=false"]
    results = {}
    for strategy in ("per_parameter", "ddp"):
        job = tmp_path / strategy
        done = run_cli([*args, f"strategy={strategy}", f"hydra.run.dir={job}"], env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        results[strategy] = load_result(job)
    ours, ddp = results["per_parameter"], results["ddp"]
    assert (ours["status"], ours["strategy"]) == ("completed", "per_parameter")
    # The same averaged gradients, summed in another order: the same training, to rounding.
    assert ours["metrics"]["final_loss"] == pytest.approx(ddp["metrics"]["final_loss"], rel=1e-4)
    assert ours["metrics"]["comm_bytes"] == ddp["metrics"]["comm_bytes"]  # both all-reduce all


def test_an_outside_strategy_is_refused_what_it_did_not_say_it_can_run(
    compose_config, tmp_path, monkeypatch
):
    _outside_strategy(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    overrides = ["strategy._target_=my_strategies.per_parameter.PerParameter",
                 "strategy.name=per_parameter", "comm_hook=bf16"]  # fmt: skip
    with pytest.raises(ConfigError, match="comm_hook=bf16 is a DDP communication hook and "
                       "strategy=per_parameter has none"):  # fmt: skip
        plan_job(compose_config(overrides), str(tmp_path), [], Machine(0))


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("my_strategies.nowhere.Missing", "strategy._target_=my_strategies.nowhere.Missing "
         "cannot be imported"),
        ("collections.OrderedDict", "is not a linkbench.parts.strategy.Parallel subclass"),
    ],
)  # fmt: skip
def test_a_strategy_target_that_is_no_strategy_is_named(compose_config, tmp_path, target, words):
    with pytest.raises(ConfigError) as error:
        plan_job(compose_config([f"strategy._target_={target}"]), str(tmp_path), [], Machine(0))
    assert words in str(error.value) and "\n" not in str(error.value)


BARRIER = '''
"""How long a barrier takes (the fastest call), with a known extra wait before each
(task.options.extra_us)."""
import logging
import time

import torch.distributed as dist

from linkbench.config.checks import require
from linkbench.metrics import Metric
from linkbench.worker.metric_log import MetricLog
from linkbench.worker.task import Task

log = logging.getLogger("linkbench")


class Barrier(Task):
    headline = "barrier_us"
    metrics = (Metric("barrier_us", "us", "lower", True, "time per barrier",
                      tag="final/barrier_us", column=True, live="perf/barrier_us"),)

    @classmethod
    def check(cls, config, device_type, notes):
        super().check(config, device_type, notes)
        extra = config.task.options.get("extra_us", 0)
        require(extra >= 0, f"task.options.extra_us={extra} must be >= 0.")

    @classmethod
    def run(cls, plan, me, board):
        options = plan.config.task.options
        for _ in range(options["warmup_iters"]):
            dist.barrier()
        calls = []
        for _ in range(options["iters"]):
            started = time.perf_counter()
            time.sleep(options.get("extra_us", 0) / 1e6)
            dist.barrier()
            calls.append((time.perf_counter() - started) * 1e6)
        if board is None:
            return {}
        # The fastest call: a busy machine stretches calls, and never shortens one.
        MetricLog.of(board).log(0, {"barrier_us": min(calls)})  # the worker knows its metric
        return {"metrics": {"barrier_us": min(calls)}}
'''


def _outside_task(tmp_path):
    yaml = (
        "name: barrier\n_target_: my_tasks.barrier.Barrier\n"
        "options: {extra_us: 0, warmup_iters: 5, iters: 50}\n"
    )
    return _outside(tmp_path, "my_tasks", "task", "barrier", BARRIER, yaml)


@pytest.mark.slow
def test_a_task_and_its_metric_from_outside_the_package_run_and_are_judged(tmp_path):
    """A sweep of the outside task with a known 4 ms more wait: the task's own metric is
    lower-is-better, so the sweep must call the longer barrier slower and size the wait.
    Slow, so alone on the machine: beside another test's job on 2 cores, every one of a
    run's 50 barriers waited 1.8 ms longer than its sleep (its fastest call 3,959 us for a
    2,000 us sleep) and 3 rounds read the 4 ms difference as inconclusive."""
    conf, env = _outside_task(tmp_path)
    sweep = tmp_path / "sweep"
    args = ["-m", "--config-dir", str(conf), "task=barrier", "task.options.extra_us=2000,6000",
            "repeats=3", "hydra.callbacks.sweep_summary.axis=task.options.extra_us",
            "hydra.callbacks.sweep_summary.baseline=2000", f"hydra.sweep.dir={sweep}"]  # fmt: skip
    done = run_cli(args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done: barrier_us " in done.stderr + done.stdout  # the default console line
    result = json.loads(next(sweep.glob("*extra_us=2000,*/result.json")).read_text())
    assert (result["task"], result["headline"]) == ("barrier", "barrier_us")
    events = EventAccumulator(str(next(sweep.glob("*extra_us=2000,*"))))
    events.Reload()
    logged = {tag: events.Scalars(tag)[0].value for tag in ("perf/barrier_us", "final/barrier_us")}
    assert logged["perf/barrier_us"] == pytest.approx(result["metrics"]["barrier_us"])
    line = next(x for x in done.stdout.splitlines() if "task.options.extra_us=6000 vs 2000" in x)
    assert "**slower**" in line and "(us, 3 vs 3 runs, paired)" in line, line
    rows = {r["task.options.extra_us"]: r for r in csv.DictReader((sweep / "summary.csv").open())}
    # The slower arm waits 4,000 us more per call (each host sleep overshoots by up to
    # 0.1 ms in its fastest call): its own metric's column in summary.csv says so.
    extra = float(rows["6000"]["barrier_us"]) - float(rows["2000"]["barrier_us"])
    assert 3_800 < extra < 4_500, rows


def test_an_outside_task_checks_its_own_keys(compose_config, tmp_path, monkeypatch):
    _outside_task(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    overrides = ["task._target_=my_tasks.barrier.Barrier", "task.name=barrier",
                 "+task.options.extra_us=-5"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"task.options.extra_us=-5 must be >= 0"):
        plan_job(compose_config(overrides), str(tmp_path), [], Machine(0))


def test_a_new_strategy_with_a_setting_of_its_own_is_one_dataclass(compose_config, tmp_path):
    """What docs/extending.md says a new built-in strategy's settings take: one dataclass
    (a StrategyConfig subclass, stored under its name, with its keys and checks) beside its
    runtime class, which the plan does not import. Before, `+strategy.tp_size=2` was refused
    and a strategy's keys had to be added to every strategy's schema."""
    from dataclasses import dataclass

    from hydra.core.config_store import ConfigStore

    from linkbench.config.checks import require
    from linkbench.config.schema import StrategyConfig

    @dataclass
    class TensorParallelStrategy(StrategyConfig):
        name: str = "tp"
        _target_: str = "my_strategies.tensor_parallel.TensorParallel"  # never imported here
        tp_size: int = 1

        def check(self, config):
            super().check(config)
            require(self.tp_size >= 1, f"strategy.tp_size={self.tp_size} must be at least 1.")

        def model_parallel_sizes(self):
            return self.tp_size, 1

    ConfigStore.instance().store(group="strategy", name="tp", node=TensorParallelStrategy)
    plan = plan_job(compose_config(["strategy=tp", "strategy.tp_size=2", "batch=8"]),
                     str(tmp_path), [], Machine(0))  # fmt: skip
    assert isinstance(plan.config.strategy, TensorParallelStrategy)
    assert plan.config.strategy.tp_size == 2
    # Its 2 ranks are one replica of the model: the global batch is one replica's batch.
    assert (plan.world_size, plan.layout.data, plan.layout.tensor) == (2, 1, 2)
    assert plan.global_batch == 8
    with pytest.raises(
        ConfigError,
        match=r"strategy=tp takes 3 tensor-parallel x 1 pipeline "
        "ranks per replica of the model, which does not divide the world of 2",
    ):
        plan_job(compose_config(["strategy=tp", "strategy.tp_size=3"]), str(tmp_path), [],
                  Machine(0))  # fmt: skip
    with pytest.raises(ConfigError, match=r"strategy\.tp_size=0 must be at least 1"):
        plan_job(compose_config(["strategy=tp", "strategy.tp_size=0"]), str(tmp_path), [],
                  Machine(0))  # fmt: skip
    # What it does not claim it can run (here DDP's gradient buckets) is refused.
    with pytest.raises(ConfigError, match="comm_hook=bf16 is a DDP communication hook and "
                       "strategy=tp has none"):  # fmt: skip
        plan_job(compose_config(["strategy=tp", "comm_hook=bf16"]), str(tmp_path), [],
                  Machine(0))  # fmt: skip


STRIPES = '''
"""Horizontal stripes whose period says the class: images a model can learn to label."""
import torch
from torch.utils.data import TensorDataset

from linkbench.parts.datasets import DataSource


def period(data):
    """The option's setting: a field of its dataclass, or a key of its YAML's options."""
    return data.options["period"] if data.options else data.period


class Stripes(DataSource):
    @classmethod
    def dataset(cls, config, local_rank, held_out=False):
        data, channels = config.data, config.model.in_channels
        n = 64 if held_out else 256
        labels = torch.arange(n) % data.num_classes
        rows = torch.arange(data.image_size)
        images = torch.stack([(rows // (period(data) * (1 + int(c)))) % 2 for c in labels])
        images = images.float()[:, None, :, None]
        images = images.expand(n, channels, data.image_size, data.image_size).contiguous()
        return TensorDataset(images, labels)
'''


STRIPES_OPTION = '''
"""The stripes option's schema: its keys and checks (no torch: Hydra imports it each run)."""
from dataclasses import dataclass

from linkbench.config.checks import require
from linkbench.config.data import DataFound, LoadedData


@dataclass
class StripesData(LoadedData):
    name: str = "stripes"
    _target_: str = "my_data.stripes.Stripes"
    num_workers: int = 0
    period: int = 1

    def __post_init__(self):
        super().__post_init__()
        require(self.period >= 1, f"data.period={self.period} must be at least 1.")

    def survey(self):
        return DataFound(train_size=256, held_out_size=64)
'''


def _outside_data(tmp_path):
    yaml = (
        "name: stripes\n_target_: my_data.stripes.Stripes\nnum_classes: 4\noptions: {period: 2}\n"
    )
    return _outside(tmp_path, "my_data", "data", "stripes", STRIPES, yaml)


def test_a_new_data_option_with_a_setting_of_its_own_is_one_dataclass(
    compose_config, tmp_path, monkeypatch
):
    """What docs/extending.md says a new data option takes: one dataclass (its keys, checks
    and sizes, stored under its name) and one runtime class that builds its data set, which
    the plan resolves once and every rank calls from the plan."""
    import torch
    from hydra.core.config_store import ConfigStore

    from linkbench.parts.data import make_batches
    from linkbench.parts.rank import Rank

    from .conftest import job_plan

    _outside_data(tmp_path)
    (tmp_path / "lab" / "my_data" / "options.py").write_text(STRIPES_OPTION)
    monkeypatch.syspath_prepend(str(tmp_path / "lab"))
    from my_data.options import StripesData

    ConfigStore.instance().store(group="data", name="stripes", node=StripesData)
    overrides = ["data=stripes", "data.period=2", "data.num_classes=4", "epochs=2", "batch=16"]
    plan = job_plan(compose_config(overrides), str(tmp_path), [], Machine(0))
    assert isinstance(plan.config.data, StripesData) and plan.config.data.period == 2
    assert plan.runtime.data.__name__ == "Stripes"  # resolved once, by the plan
    assert plan.steps == 2 * (256 // 2 // 16)  # its size made the epochs into steps
    images, labels = next(make_batches(plan, 16, Rank(0, 0, 2, torch.device("cpu"))).stream)
    assert images.shape == (16, 3, 32, 32)
    first = images[labels == 0][0, 0, :8, 0].tolist()  # class 0: period 2, rows 0-1 dark
    assert first == [0, 0, 1, 1, 0, 0, 1, 1]
    with pytest.raises(ConfigError, match=r"^data\.period=0 must be at least 1\.$"):
        job_plan(compose_config(["data=stripes", "data.period=0"]), str(tmp_path), [], Machine(0))


def test_a_data_option_from_outside_the_package_trains_and_is_evaluated(tmp_path):
    """One module and one YAML file, through run.py: its setting under options, its data
    set built on every rank by its runtime class, held out and evaluated."""
    conf, env = _outside_data(tmp_path)
    job = tmp_path / "job"
    args = ["--config-dir", str(conf), *QUICK, "data=stripes", "task.no_sync_steps=0"]
    done = run_cli([*args, f"hydra.run.dir={job}"], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(job)
    assert (result["status"], result["data"]) == ("completed", "stripes")
    assert 0 <= result["metrics"]["eval_accuracy"] <= 1
    # Without a size of its own, a budget in epochs is refused in one sentence.
    given = ["--config-dir", str(conf), "data=stripes", "epochs=1"]
    refused = run_cli([*given, f"hydra.run.dir={tmp_path / 'no'}"], env=env)
    assert refused.returncode != 0
    assert "data=stripes has none" in refused.stderr, refused.stderr[-2000:]


STORED = '''
"""Hydra imports every module under hydra_plugins as it starts: the option is stored here."""
from hydra.core.config_store import ConfigStore

from my_data.options import StripesData

ConfigStore.instance().store(group="data", name="stripes", node=StripesData)
'''


def test_a_typed_data_option_of_an_installed_package_trains_through_run_py(tmp_path):
    """An outside package's option with a typed setting of its own (data.period, not
    data.options.period): a hydra_plugins module of the package stores its dataclass, so
    run.py knows the key, refuses a bad value before any worker starts and trains with it;
    no YAML file, no --config-dir."""
    lab = tmp_path / "lab"
    files = {
        "my_data/__init__.py": "",
        "my_data/options.py": STRIPES_OPTION,
        "my_data/stripes.py": STRIPES,
        "hydra_plugins/my_data_options/__init__.py": STORED,
    }
    for path, text in files.items():
        (lab / path).parent.mkdir(parents=True, exist_ok=True)
        (lab / path).write_text(text)
    env = clean_env(python_path=lab)
    args = ["data=stripes", "data.period=2", "data.num_classes=4", "epochs=1", "batch=16",
            "untimed_steps=2", "log_every=2", "task.no_sync_steps=0"]  # fmt: skip
    job = tmp_path / "job"
    done = run_cli([*args, f"hydra.run.dir={job}"], env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = load_result(job)
    assert (result["status"], result["data"], result["steps"]) == ("completed", "stripes", 8)
    manifest = json.loads((job / "manifest.json").read_text())
    assert manifest["config"]["data"]["period"] == 2
    for wrong, said in (("data.period=0", "data.period=0 must be at least 1."),
                        ("data.perido=2", "data.perido is not a key of linkbench's config; "
                                          "did you mean data.period")):  # fmt: skip
        refused = run_cli(["data=stripes", wrong, f"hydra.run.dir={tmp_path / 'no'}"], env=env)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr[-2000:]
        assert len(refused.stderr.strip().splitlines()) == 1
