"""One helper turns pydantic's ValidationError into the project's field error (core/errors.py),
and one check keeps reward components summing to the reward (core/schemas.py)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from rollgate.core.errors import BadRequest, NotFound, field_error, field_of, validation_summary
from rollgate.core.schemas import VerifyResult


class Inner(BaseModel):
    n: int

    @field_validator("n")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v


class Outer(BaseModel):
    name: str
    items: list[Inner]
    either: int | str = 0


def errors_of(data) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Outer.model_validate(data)
    return info.value


def test_the_field_error_names_the_path_and_the_reason_without_pydantic_noise():
    exc = errors_of({"name": "x", "items": [{"n": 3}, {"n": 0}]})
    err = field_error(exc, component="svc", where="tasks.jsonl:4: ")
    assert isinstance(err, BadRequest) and err.status == 400 and err.component == "svc"
    assert err.field == "items.1.n"
    assert err.message == "tasks.jsonl:4: items.1.n: must be at least 1"  # not "Value error, must be ..."


def test_prefix_default_field_override_note_and_class():
    exc = errors_of({"items": []})
    err = field_error(exc, component="env", prefix="envs.0", field="envs", note=" (an entry)", cls=NotFound)
    assert isinstance(err, NotFound)
    assert (err.field, err.message) == ("envs", "envs.0.name: Field required (an entry)")
    assert field_of({"loc": ()}) == "" and field_error(_root_error(), component="c").field == "body"


def _root_error() -> ValidationError:
    with pytest.raises(ValidationError) as info:
        Inner.model_validate("not an object")
    return info.value


def test_union_member_tags_can_be_skipped_and_the_deepest_error_picked():
    exc = errors_of({"name": "x", "items": [], "either": [1]})
    assert {field_of(e) for e in exc.errors()} == {"either.int", "either.str"}
    assert field_error(exc, component="c", skip={"int", "str"}).field == "either"
    deep = errors_of({"items": [{"n": 0}]})
    assert field_error(deep, component="c").field == "name"
    assert field_error(deep, component="c", deepest=True).field == "items.0.n"


def test_the_summary_lists_up_to_the_limit():
    exc = errors_of({"items": [{"n": 0}, {"n": "x"}]})
    assert validation_summary(exc, limit=1) == "name: Field required"
    assert validation_summary(exc).count("; ") == 2


def test_reward_components_must_sum_to_the_reward():
    assert VerifyResult(reward=1.5, reward_components={"a": 1.0, "b": 0.5}).reward == 1.5
    with pytest.raises(ValidationError, match="reward_components sum to 1.0, reward is 2.0"):
        VerifyResult(reward=2.0, reward_components={"a": 1.0})


def test_indexed_paths_write_list_positions_in_brackets_as_the_openai_apis_do():
    exc = errors_of({"name": "x", "items": [{"n": 3}, {"n": 0}]})
    err = field_error(exc, component="model", prefix="input[2]", indexed=True)
    assert (err.field, err.message) == ("input[2].items[1].n", "input[2].items[1].n: must be at least 1")
    assert field_of({"loc": (0, "content")}, indexed=True) == "[0].content"
