"""The compiled check of a flat argument schema (shared/contract/argument_schema.py) only ever
agrees with jsonschema: where it says valid, jsonschema does too, on every draft the
validators are picked for; where it cannot tell, jsonschema answers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema.validators import Draft4Validator, Draft7Validator, Draft202012Validator

from loopwire.shared.contract.argument_schema import ArgumentValidator, surely_valid

FLAT = [
    {"type": "object"},
    {"type": "object", "properties": {"n": {"type": "integer", "default": 0, "description": "which"}},
     "additionalProperties": False},
    {"type": "object", "properties": {"path": {"type": "string", "title": "Path"}, "n": {"type": "number"},
                                      "deep": {"type": "boolean"}, "opts": {"type": "object"},
                                      "items": {"type": "array"}, "none": {"type": "null"}, "any": {}},
     "required": ["path", "n"]},
    {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"],
     "additionalProperties": True, "$schema": "https://json-schema.org/draft/2020-12/schema"},
]
"""Schemas of the shape the check compiles."""

NOT_FLAT = [
    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
    {"type": "object", "properties": {"n": {"type": ["integer", "null"]}}},
    {"type": "object", "properties": {"n": {"enum": [1, 2]}}},
    {"type": "object", "properties": {"o": {"type": "object", "properties": {"x": {"type": "string"}}}}},
    {"type": "object", "additionalProperties": {"type": "string"}},
    {"type": "object", "properties": {"n": True}},
    {"type": "object", "minProperties": 1},
    {"type": "object", "properties": {"s": {"type": "string", "format": "date-time"}}},
    {"properties": {"n": {"type": "integer"}}},
    {"type": "array"},
    True,
]
"""Schemas with a keyword the check does not know: jsonschema alone decides."""

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6)
arguments = st.dictionaries(st.sampled_from(["n", "a", "b", "path", "deep", "opts", "items", "none", "any", "x"]),
                            json_values, max_size=5) | json_values


@pytest.mark.parametrize("schema", NOT_FLAT, ids=str)
def test_a_schema_beyond_the_flat_shape_is_left_to_jsonschema(schema: Any) -> None:
    assert surely_valid(schema) is None


@pytest.mark.parametrize("schema", FLAT, ids=str)
def test_a_flat_schema_is_compiled(schema: Any) -> None:
    assert surely_valid(schema) is not None


@settings(max_examples=400, deadline=None)
@given(schema=st.sampled_from(FLAT), value=arguments)
def test_what_the_check_accepts_every_draft_accepts(schema: dict[str, Any], value: Any) -> None:
    check = surely_valid(schema)
    assert check is not None
    if check(value):
        for draft in (Draft4Validator, Draft7Validator, Draft202012Validator):
            assert draft(schema).is_valid(value), (draft.__name__, value)


@settings(max_examples=300, deadline=None)
@given(schema=st.sampled_from(FLAT + NOT_FLAT[:-1]), value=arguments)
def test_the_validator_answers_as_jsonschema_does(schema: dict[str, Any], value: Any) -> None:
    plain = Draft202012Validator(schema)
    checked = ArgumentValidator(plain)
    assert checked.is_valid(value) == plain.is_valid(value)
    assert [e.message for e in checked.iter_errors(value)] == [e.message for e in plain.iter_errors(value)]


def test_the_check_answers_the_common_cases() -> None:
    check = surely_valid(FLAT[2])
    assert check is not None
    assert check({"path": "a", "n": 1.5, "deep": True, "opts": {}, "items": [], "none": None, "any": object()})
    assert check({"path": "a", "n": 2, "extra": "allowed"}), "additionalProperties is true by default"
    assert not check({"path": "a"}), "n is required"
    assert not check({"path": 1, "n": 1}), "a path is a string"
    assert not check({"path": "a", "n": True}), "a bool is not a number here (jsonschema says so too)"
    assert not check(["path", "n"])
    strict = surely_valid(FLAT[1])
    assert strict is not None and strict({"n": 3}) and strict({})
    assert not strict({"n": 3, "m": 1}), "no other names"
    assert not strict({"n": 3.0}), "left to jsonschema, whose drafts differ on 3.0"
    assert Draft202012Validator(FLAT[1]).is_valid({"n": 3.0}) and not Draft4Validator(FLAT[1]).is_valid({"n": 3.0})


def test_a_deferred_validator_builds_jsonschema_only_when_the_check_cannot_answer() -> None:
    built: list[Any] = []

    def build(schema: Any) -> Draft202012Validator:
        built.append(schema)
        return Draft202012Validator(schema)

    flat = ArgumentValidator.deferred(FLAT[2], build)
    assert flat.is_valid({"path": "a", "n": 1}) and built == []
    assert not flat.is_valid({"path": 1, "n": 1}) and built == [FLAT[2]], "the check is unsure: jsonschema answers"
    assert [e.message for e in flat.iter_errors({"path": 1, "n": 1})] == \
        [e.message for e in Draft202012Validator(FLAT[2]).iter_errors({"path": 1, "n": 1})]
    assert len(built) == 1, "built once"
    other = ArgumentValidator.deferred(NOT_FLAT[0], build)
    other.is_valid({})
    assert built[-1] == NOT_FLAT[0]
