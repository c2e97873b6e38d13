"""Defects found trying the project on the GPU machine and here, each pinned by a test."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from linkbench.config.machine import Machine
from linkbench.errors import ConfigError
from linkbench.launcher.callbacks import unwritable_reason
from linkbench.launcher.planning import plan_job
from linkbench.launcher.sweeper import check_rounds, sweep_rounds

from ..conftest import job_plan

CPU = Machine(cuda_devices=0)


def test_the_old_untimed_name_is_clamped_like_the_new_one(compose_config, tmp_path):
    budget = ["epochs=1", "data=digits", "batch=256"]
    new = job_plan(compose_config([*budget, "untimed_steps=10"]), str(tmp_path), [], CPU)
    old = job_plan(compose_config([*budget, "warmup_steps=10"]), str(tmp_path), [], CPU)
    assert old.config.untimed_steps == new.config.untimed_steps == new.config.steps - 1


@pytest.mark.parametrize("key", ["base_lr", "debug.step_delay_ms", "dist_timeout_s"])
def test_non_finite_numbers_are_refused_up_front(compose_config, tmp_path, key):
    with pytest.raises(ConfigError, match=f"{key}=inf is not a finite number"):
        job_plan(compose_config([f"{key}=inf"]), str(tmp_path), [], CPU)


def test_fake_data_follows_the_models_channels(compose_config, tmp_path):

    cfg = compose_config(["data=fake", "data.size=64", "model.in_channels=1"])
    plan = job_plan(cfg, str(tmp_path), [], CPU)
    config = plan.config
    assert plan.runtime.data.dataset(config, 0)[0][0].shape[0] == 1


def test_an_output_directory_that_cannot_be_created_is_named():
    assert "cannot be created" in unwritable_reason(__import__("pathlib").Path("/proc/x/y"))


def _sweep(subdir: str, launcher: str = "hydra._internal.core_plugins.basic_launcher") -> object:
    return OmegaConf.create(
        {
            "repeats": 1,
            "hydra": {
                "sweep": {"subdir": subdir},
                "job": {"config": {"override_dirname": {"exclude_keys": ["resume"]}}},
                "launcher": {"_target_": launcher},
                "sweeper": {"params": {"repeats": "3"}},
                "overrides": {"task": ["batch=8,16"]},
            },
        }
    )


def test_repeats_under_the_sweepers_params_run_as_rounds():
    assert sweep_rounds(_sweep("${hydra.job.override_dirname}")) == 3


def test_a_subdir_without_the_round_is_refused_in_one_sentence():
    with pytest.raises(ConfigError, match=r"add \$\{round\}"):
        check_rounds(_sweep("b${batch}"), 3, concurrent_jobs=False)
    check_rounds(_sweep("b${batch}_r${round}"), 3, concurrent_jobs=False)
    check_rounds(_sweep("${hydra.job.override_dirname}"), 3, concurrent_jobs=False)


def test_a_launcher_that_runs_jobs_together_is_refused_unless_asked_for():
    joblib = _sweep("${hydra.job.override_dirname}", "x.joblib_launcher.JoblibLauncher")
    with pytest.raises(ConfigError, match="concurrent_jobs=true"):
        check_rounds(joblib, 3, concurrent_jobs=False)
    check_rounds(joblib, 3, concurrent_jobs=True)
    # under repeats=auto the sentence names what the user set, not max_rounds as repeats
    with pytest.raises(ConfigError) as refused:
        check_rounds(joblib, 8, concurrent_jobs=False, adaptive=True)
    assert "rounds of repeats=auto (up to hydra.sweeper.max_rounds=8)" in str(refused.value)
    assert "repeats=8" not in str(refused.value)


def test_hparams_leave_unset_keys_out_and_read_as_the_user_wrote_them(compose_config, tmp_path):
    from linkbench.analysis.board import session_end_pb
    from linkbench.launcher.hparams import hparams_of

    plan = plan_job(compose_config(), str(tmp_path), ["cudnn_benchmark=null", "batch=8"], CPU)
    values = hparams_of(plan, {"epochs": None, "batch": 8, "lr": 0.025})
    assert "cudnn_benchmark" not in values and "epochs" not in values
    assert (values["batch"], values["lr"]) == ("8", "0.025")  # not 8.0000 and 0.025000
    # DDP's hook, in the column a sweep over it names (one column, not two).
    assert values["strategy/comm_hook"] == "none"
    swept = ["strategy/comm_hook=bf16"]
    hooked = plan_job(compose_config(swept), str(tmp_path), swept, CPU)
    values = hparams_of(hooked, {})
    assert values["strategy/comm_hook"] == "bf16" and "strategy.comm_hook" not in values
    fsdp = plan_job(compose_config(["strategy=fsdp"]), str(tmp_path), [], CPU)
    assert "strategy/comm_hook" not in hparams_of(fsdp, {})
    # Each strategy's own settings are columns, read from its option (none named here).
    assert values["strategy.bucket_cap_mb"] == "25" and values["strategy.static_graph"] is False
    fsdp_values = hparams_of(fsdp, {})
    assert fsdp_values["strategy.reshard_after_forward"] is True
    assert not {"strategy.bucket_cap_mb", "strategy.shard_classes"} & set(fsdp_values)
    texts = ["strategy=fsdp", "strategy.param_dtype=bfloat16"]
    mixed = hparams_of(plan_job(compose_config(texts), str(tmp_path), [], CPU), {})
    assert mixed["strategy.param_dtype"] == "bfloat16"  # a choice: its name
    assert "strategy.param_dtype" not in fsdp_values  # unset: left out
    from tensorboard.plugins.hparams import plugin_data_pb2

    end = session_end_pb(True).value[0].metadata.plugin_data.content
    assert plugin_data_pb2.HParamsPluginData.FromString(end).session_end_info.end_time_secs > 0


def test_overrides_are_read_by_hydras_parser():
    """Quoted values, ++ and deletions as Hydra reads them; numbers as numbers, the rest as YAML
    spells it (the sweep summary groups jobs by these)."""
    from linkbench.config.overrides import sets, settings

    found = settings(["batch=32", "++lr=0.5", "data.root='a b=c'", "eval.enabled=true",
                      "~seed", "resume=true", "hydra.run.dir=x", "model.loss=null"])  # fmt: skip
    assert found == {"batch": 32, "lr": 0.5, "data.root": "a b=c", "eval.enabled": "true",
                     "model.loss": "null"}  # fmt: skip
    assert sets(["+steps=10"], "steps") and not sets(["steps_per_x=1"], "steps")
