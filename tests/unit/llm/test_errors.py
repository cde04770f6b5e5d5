"""The error classifier: each API status and transport error as a step error, retryable or not."""

from __future__ import annotations

import anthropic
import httpx2
import pytest

from loopwire.llm.errors import classify

pytestmark = pytest.mark.unit


# -- error classifier -------------------------------------------------------------------------
def status_error(status: int, err_type: str = "api_error", message: str = "boom",
                 headers: dict[str, str] | None = None) -> anthropic.APIStatusError:
    request = httpx2.Request("POST", "http://fake/v1/messages")
    body = {"type": "error", "error": {"type": err_type, "message": message}}
    response = httpx2.Response(status, request=request, json=body, headers=headers or {})
    from anthropic._error_classes import make_status_error

    return make_status_error(f"Error code: {status}", body=body, response=response)


@pytest.mark.parametrize(("status", "err_type", "message", "code", "retryable"), [
    (429, "rate_limit_error", "slow down", "rate_limited", True),
    (529, "overloaded_error", "Overloaded", "model_overloaded", True),
    (500, "api_error", "oops", "server_error", True),
    (503, "api_error", "unavailable", "server_error", True),
    (408, "timeout_error", "late", "timeout", True),
    (400, "invalid_request_error", "messages: field required", "bad_request", False),
    (400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum", "context_too_long", False),
    (401, "authentication_error", "invalid x-api-key", "auth", False),
    (403, "permission_error", "no", "auth", False),
    (404, "not_found_error", "model: claude-nope", "not_found", False),
    (200, "overloaded_error", "Overloaded", "model_overloaded", True),  # an error event in a stream
])
def test_classify_status_errors(status: int, err_type: str, message: str, code: str, retryable: bool) -> None:
    err = classify(status_error(status, err_type, message), "claude-x")
    assert (err.code, err.retryable, err.model) == (code, retryable, "claude-x")
    assert err.message == message
    step = err.to_step_error()
    assert step.code == code and step.retryable is retryable and step.model == "claude-x"


def test_classify_transport_errors_and_retry_after() -> None:
    request = httpx2.Request("POST", "http://fake/v1/messages")
    assert classify(anthropic.APITimeoutError(request)).code == "timeout"
    conn = classify(anthropic.APIConnectionError(request=request))
    assert conn.code == "connection" and conn.retryable
    assert classify(httpx2.ReadError("reset", request=request)).retryable
    bug = classify(KeyError("x"))
    assert bug.code == "internal" and not bug.retryable
    limited = classify(status_error(429, "rate_limit_error", headers={"retry-after": "3"}))
    assert limited.retry_after_s == 3.0 and limited.status == 429
