"""Hydra's and OmegaConf's own errors on bad input, as one sentence each: the errors are
raised by Hydra itself (its compose API, as run.py composes), then put into words."""

from __future__ import annotations

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from linkbench.config.hydra_errors import sentence

from ..conftest import CONF


def _raised(overrides: list[str], config_dir: str = str(CONF)) -> BaseException:
    GlobalHydra.instance().clear()
    with (
        initialize_config_dir(config_dir=config_dir, version_base="1.3"),
        pytest.raises(Exception) as error,
    ):
        compose("config", overrides=overrides)
    return error.value


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["model=resnet"], "model=resnet is not an option; choose one of auto, custom, gpt, "
         "gpt_186m, resnet18, resnet50, tiny, torchvision, vit_b_16; did you mean resnet50 or "
         "resnet18?"),
        (["precision=bf61"], "precision=bf61 is not an option; choose one of auto, bf16, fp16, "
         "fp32, tf32; did you mean bf16?"),
        (["+experiment=nvlink_vs_pcei"], "+experiment=nvlink_vs_pcei is not a committed "
         "experiment; choose one of"),
        (["model="], "model= names no option; choose one of auto,"),
        (["steps=ten"], "steps=ten is not a whole number; give steps a whole number."),
        (["batch=1.5"], "batch=1.5 is not a whole number"),
        (["eval.enabled=perhaps"], "eval.enabled=perhaps is not true or false"),
        (["scaling.rule=cubic"], "scaling.rule=cubic is not one of linear, sqrt, none."),
        (["base_lr=fast"], "base_lr=fast is not a number; give base_lr a number."),
    ],
)  # fmt: skip
def test_hydras_own_errors_become_one_sentence(overrides, expected):
    said = sentence(_raised(overrides), overrides)
    assert said is not None and said.startswith(expected), said
    assert "\n" not in said


def test_an_override_hydra_cannot_parse_is_named():
    from hydra.errors import OverrideParseException

    said = sentence(OverrideParseException("batch==8", "x"), ["batch=8", "batch==8"])
    assert said is not None and said.startswith("batch==8 is not an override Hydra can read (")


def test_a_user_yaml_that_does_not_parse_names_file_and_line(tmp_path):
    (tmp_path / "config.yaml").write_text("batch: [8, 16\nsteps: 5\n")
    error = _raised([], str(tmp_path))
    found = error if isinstance(error, yaml.YAMLError) else error.__cause__
    assert isinstance(found, yaml.YAMLError) or "yaml" in type(error).__name__.lower()
    said = sentence(error)
    assert said is not None and "config.yaml, line" in said and said.endswith("fix that file.")


def test_errors_it_does_not_know_are_left_to_hydra():
    assert sentence(RuntimeError("boom")) is None
