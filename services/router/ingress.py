"""Decoding of ingress messages into router inputs; every way the input can be bad
becomes a RejectedInput with a code a client can act on."""

from __future__ import annotations

import orjson
from pydantic import ValidationError

from loopwire.shared.contract import INGRESS_MODELS, describe_validation_error
from loopwire.shared.subjects import valid_session_id

from . import inputs as i

_INPUT_TYPES = {
    "start": i.StartInput,
    "message": i.MessageInput,
    "steer": i.SteerInput,
    "abort": i.AbortInput,
    "decision": i.DecisionInput,
}


def decode_ingress(verb: str, data: bytes, input_id: str, new_id: str, max_bytes: int) -> i._Input:
    """Bytes of `loopwire.in.<sid>.<verb>` -> a router input (maybe a RejectedInput)."""
    if verb not in INGRESS_MODELS:
        return i.RejectedInput(input_id=input_id, code="unknown_verb",
                               message=f"unknown verb '{verb}'; expected one of {', '.join(INGRESS_MODELS)}")
    if len(data) > max_bytes:
        return i.RejectedInput(input_id=input_id, code="body_too_large",
                               message=f"the body is {len(data)} bytes; the limit is {max_bytes}")
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return i.RejectedInput(input_id=input_id, code="bad_json", message=f"the body is not valid JSON: {exc}")
    if not isinstance(raw, dict):
        return i.RejectedInput(input_id=input_id, code="bad_request", message="the body must be a JSON object")
    try:
        body = INGRESS_MODELS[verb].model_validate(raw)
    except ValidationError as exc:
        return i.RejectedInput(input_id=input_id, code="invalid_body",
                               message=f"invalid {verb} body: {describe_validation_error(exc)}")
    return _INPUT_TYPES[verb](input_id=input_id, new_id=new_id, body=body)


def check_session_id(sid: str) -> bool:
    return valid_session_id(sid)
