"""Tool arguments against their JSON Schema, with a compiled check of the common flat shape
in front of jsonschema.

Every tool call's arguments are checked twice, by the router's plan gate
(services/router/core/strategy_loop.py) and by the tools service before the call
(services/tools/executor.py). jsonschema walks the schema for each check (8 µs for the
bench tool's one-field object, 20 µs for three fields); most tools' schemas
are what pydantic makes of a function's parameters: an object of named fields of plain
types. For such a schema `surely_valid` builds a predicate that answers True only when
the arguments are valid by every draft's rules (exact Python types, required names, no
extra names where `additionalProperties` is false); any other answer, and any schema
with a keyword it does not know, is left to jsonschema. So the fast check can only
agree with jsonschema, never overrule it (tests/unit/test_argument_schema.py compares
the two on generated values).

jsonschema itself is imported by the callers, when they first check (the router keeps
it out of its idle memory): this module imports nothing of it at run time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError
    from jsonschema.protocols import Validator

__all__ = ["ArgumentValidator", "surely_valid"]

Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset({"title", "description", "default", "examples", "$comment", "deprecated",
                          "readOnly", "writeOnly"})
"""Keywords that assert nothing (annotations in every draft)."""
_OBJECT_KEYWORDS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties", "$schema"}
_FIELD_KEYWORDS = _ANNOTATIONS | {"type"}

_TYPES: dict[str, Check] = {
    # Exact types: a bool is no integer, 3.0 no integer in draft 4: the forms where the
    # drafts differ are left to jsonschema (they answer False here, and it decides).
    "string": lambda v: type(v) is str,
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) is int or type(v) is float,
    "boolean": lambda v: type(v) is bool,
    "null": lambda v: v is None,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
}


def _any(value: Any) -> bool:
    return True


def _field_check(schema: Any) -> Check | None:
    """The check of one property's schema: a plain `type` and annotations only, else None."""
    if not isinstance(schema, dict) or not schema.keys() <= _FIELD_KEYWORDS:
        return None
    kind = schema.get("type")
    if kind is None:
        return _any
    return _TYPES.get(kind) if isinstance(kind, str) else None


def surely_valid(schema: Any) -> Check | None:
    """A predicate that is True only for values `schema` accepts (False: jsonschema must
    say), or None when the schema is not of the flat object shape it knows."""
    if not isinstance(schema, dict) or schema.get("type") != "object" or not schema.keys() <= _OBJECT_KEYWORDS:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    extra = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(required, list) or type(extra) is not bool:
        return None
    if not all(isinstance(name, str) for name in required):
        return None
    fields: dict[str, Check] = {}
    for name, field_schema in properties.items():
        field_check = _field_check(field_schema)
        if field_check is None:
            return None
        fields[name] = field_check
    needed = tuple(required)

    def valid(value: Any) -> bool:
        if type(value) is not dict:
            return False
        for name in needed:
            if name not in value:
                return False
        for name, item in value.items():
            of_field = fields.get(name)
            if of_field is None:
                if not extra:
                    return False
            elif not of_field(item):
                return False
        return True

    return valid


class ArgumentValidator:
    """A jsonschema validator whose `is_valid` asks the schema's compiled check first
    (`surely_valid`); its errors are jsonschema's."""

    def __init__(self, validator: Validator | None, *, schema: Any = None,
                 build: Callable[[Any], Validator] | None = None) -> None:
        self._validator = validator
        self.schema = validator.schema if validator is not None else schema
        self._build = build
        self._quick = surely_valid(self.schema)

    @classmethod
    def deferred(cls, schema: Any, build: Callable[[Any], Validator]) -> ArgumentValidator:
        """One whose jsonschema validator is built (`build(schema)`) at the first check the
        compiled one cannot answer: a process whose tools all have flat schemas never
        imports jsonschema (the router: 47 modules, a few MB it would keep after a load)."""
        return cls(None, schema=schema, build=build)

    @property
    def validator(self) -> Validator:
        if self._validator is None:
            assert self._build is not None
            self._validator = self._build(self.schema)
        return self._validator

    def is_valid(self, instance: Any) -> bool:
        quick = self._quick
        if quick is not None and quick(instance):
            return True
        return self.validator.is_valid(instance)

    def iter_errors(self, instance: Any) -> Iterator[ValidationError]:
        return self.validator.iter_errors(instance)
