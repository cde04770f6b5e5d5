"""Decoding of ingress messages into router inputs; every way the input can be bad
becomes a RejectedInput with a code a client can act on: `unknown_verb`,
`body_too_large`, `bad_json`, `bad_request`, `body_too_deep`, `unsupported_version`,
`internal_field` (shared/contract/input_guard.py), `invalid_body`."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from loopwire.shared.contract.input_guard import (
    INTERNAL_PREFIX,
    deeper_than,
    internal_field_paths,
    unknown_fields,
    version_problem,
)
from loopwire.shared.contract.protocol import INGRESS_MODELS, StartRun, describe_validation_error
from loopwire.shared.contract.subjects import valid_session_id

from .inputs import AbortInput, BaseInput, DecisionInput, MessageInput, RejectedInput, StartInput, SteerInput

_INPUT_TYPES = {
    "start": StartInput,
    "message": MessageInput,
    "steer": SteerInput,
    "abort": AbortInput,
    "decision": DecisionInput,
}
_CONTENT_FIELDS = ("input", "content")
"""The fields of an ingress body that hold messages or content blocks."""


def decode_ingress(verb: str, data: bytes, input_id: str, *, new_id: str, max_bytes: int,
                   max_depth: int = 32) -> BaseInput:
    """Bytes of `loopwire.in.<sid>.<verb>` -> a router input (maybe a RejectedInput)."""
    if verb not in INGRESS_MODELS:
        return RejectedInput(input_id=input_id, code="unknown_verb",
                               message=f"unknown verb '{verb}'; expected one of {', '.join(INGRESS_MODELS)}")
    if len(data) > max_bytes:
        return RejectedInput(input_id=input_id, code="body_too_large",
                               message=f"the body is {len(data)} bytes; the limit is {max_bytes}")
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return RejectedInput(input_id=input_id, code="bad_json", message=f"the body is not valid JSON: {exc}")
    if not isinstance(raw, dict):
        return RejectedInput(input_id=input_id, code="bad_request", message="the body must be a JSON object")
    if deeper_than(raw, max_depth):
        return RejectedInput(input_id=input_id, code="body_too_deep",
                               message=f"the body nests objects and arrays deeper than {max_depth} levels "
                                       "(LOOPWIRE_MAX_BODY_DEPTH)")
    problem = version_problem(raw)
    if problem is not None:
        return RejectedInput(input_id=input_id, code="unsupported_version", message=problem)
    internal = internal_field_paths({k: raw[k] for k in _CONTENT_FIELDS if k in raw})
    if internal:
        return RejectedInput(input_id=input_id, code="internal_field",
                               message=f"content may not carry loopwire's own fields ({', '.join(internal[:5])}): "
                                       f"keys starting with '{INTERNAL_PREFIX}' are set by loopwire only")
    model = INGRESS_MODELS[verb]
    try:
        body = model.model_validate(raw)
    except ValidationError as exc:
        return RejectedInput(input_id=input_id, code="invalid_body",
                               message=f"invalid {verb} body: {describe_validation_error(exc)}")
    if verb == "start":
        assert isinstance(body, StartRun)
        return StartInput(input_id=input_id, new_id=new_id, body=body, ignored_fields=unknown_fields(raw, model))
    return _INPUT_TYPES[verb](input_id=input_id, new_id=new_id, body=body)


def check_session_id(sid: str, tenants: bool = False) -> bool:
    return valid_session_id(sid, tenants)
