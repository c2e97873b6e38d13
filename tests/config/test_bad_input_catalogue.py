"""Every bad input of the catalogue (tests/config/bad_inputs.py) as a user types it: one
sentence naming the key, exit status 2, no Hydra lines, no worker, within a minute. The
whole catalogue is a slow study (a process each); the default suite runs a sample of the
kinds Hydra finds itself."""

from __future__ import annotations

import pytest

from ..conftest import clean_env
from .bad_inputs import CASES, Case, outcome

# One of each kind Hydra or OmegaConf finds before linkbench sees the config.
SAMPLE = ("model=resnet", "steps=ten", "batch==8", "batch=8,16", "--config-dir {broken}",
          "hydra.sweeper.max_round=3", "margin=-1")  # fmt: skip


def _ids(case: Case) -> str:
    return " ".join(case.args)[:60]


def _check(case: Case, tmp_path) -> None:
    found = outcome(case, tmp_path, clean_env())
    assert not found.problems, f"{' '.join(case.args)}: {found.problems}: {found.stderr[-2000:]}"


@pytest.mark.parametrize(
    "case", [c for c in CASES if any(s in " ".join(c.args) for s in SAMPLE)], ids=_ids
)
def test_a_sample_of_hydras_own_findings_is_one_sentence(case, tmp_path):
    _check(case, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_every_bad_input_of_the_catalogue_is_one_sentence_before_any_worker(case, tmp_path):
    _check(case, tmp_path)
