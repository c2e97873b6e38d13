"""result.json as a type: every field a real job writes is one :class:`JobResult` names, of
the type it names, and a file is read as one (or refused) in one place."""

from __future__ import annotations

import json
import types
import typing
from typing import Any, Literal, get_args, get_origin, get_type_hints

import pytest

from linkbench.files import RESULT_FILE
from linkbench.result import JobResult, UnknownLayout, read_result


def _is(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of a field's declared type (float takes a JSON integer)."""
    origin = get_origin(hint)
    if hint is Any:
        return True
    if origin is Literal:
        return value in get_args(hint)
    if origin in (types.UnionType, typing.Union):
        return any(_is(value, h) for h in get_args(hint))
    if origin is list:
        (item,) = get_args(hint)
        return isinstance(value, list) and all(_is(v, item) for v in value)
    if origin is dict:
        _key, item = get_args(hint)
        return isinstance(value, dict) and all(_is(v, item) for v in value.values())
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def test_every_field_of_a_real_job_is_named_by_the_type_with_its_type(default_job):
    written = json.loads((default_job.path / RESULT_FILE).read_text())
    hints = get_type_hints(JobResult)
    assert set(written) - set(hints) == set(), "name these fields in linkbench.result.JobResult"
    wrong = {k: v for k, v in written.items() if not _is(v, hints[k])}
    assert wrong == {}, "these fields are not of the type JobResult names"
    assert "job" not in written  # the reader's, never written


def test_the_type_checker_of_this_test_tells_a_wrong_type():
    hints = get_type_hints(JobResult)
    assert not _is("3", hints["world_size"]) and not _is(True, hints["world_size"])
    assert not _is("done", hints["status"]) and _is("failed", hints["status"])
    assert not _is({"a": "x"}, hints["phases_s"]) and _is({"a": 1}, hints["phases_s"])
    assert _is(None, hints["round"]) and not _is([1], hints["notes"])


def test_a_result_file_is_read_as_one_or_refused_in_one_sentence(tmp_path):
    job = tmp_path / "batch=4"
    job.mkdir()
    assert read_result(job) is None  # no file
    (job / RESULT_FILE).write_text('{"status": "compl')  # cut short
    assert read_result(job) is None
    (job / RESULT_FILE).write_text('["not", "an", "object"]')
    assert read_result(job) is None
    (job / RESULT_FILE).write_text(json.dumps({"status": "completed", "metrics": {}}))
    read = read_result(job)  # no schema_version: written before layouts were numbered
    assert read is not None and read["status"] == "completed" and read["job"] == "batch=4"
    (job / RESULT_FILE).write_text(json.dumps({"schema_version": 7, "status": "completed"}))
    with pytest.raises(UnknownLayout) as error:
        read_result(job)
    assert str(error.value).startswith(f"{job / RESULT_FILE} has result layout 7, ")
    assert str(error.value).count(". ") == 0 and str(error.value).endswith("upgrade this one.")
