"""Model call failures as data, and the classifier of the Anthropic SDK's exceptions.

One exception, many codes::

    ModelCallError(code, message, retryable, status)
      retryable:     rate_limited (429)  model_overloaded (529)  server_error (5xx)
                     timeout (408, APITimeoutError)  connection (APIConnectionError,
                     a dropped stream)  conflict (409)
      not retryable: bad_request (400, other 4xx)  context_too_long (400 "prompt is too
                     long")  auth (401, 403)  billing (402)  not_found (404)
                     internal (anything unexpected: a bug is not fixed by retrying)

The retries (retrying.py) ask again on the retryable ones and the fallback chain
(fallback.py) then moves to the next model; both stop at once on the others (a 400 or a bad key fails on every model alike).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from loopwire.shared.contract.envelopes import StepError

if TYPE_CHECKING:
    import anthropic


class ModelCallError(Exception):
    """A failed model call; `retryable` says whether the same call may succeed later."""

    def __init__(self, code: str, message: str, retryable: bool = False, *, status: int | None = None,
                 model: str | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = retryable
        self.status = status
        self.model = model
        self.retry_after_s = retry_after_s
        """The server's `retry-after`, when it sent one (a lower bound for the backoff)."""
        self.same_model_spent = False
        """Asking this model again now cannot help (it waited out the model limits): the
        retries leave it to the next fallback at once."""
        self.fallbacks: list[dict[str, str]] = []
        """Model switches made before this error ended the chain (set by the fallback runner)."""

    def to_step_error(self) -> StepError:
        return StepError(code=self.code, message=self.message, retryable=self.retryable,
                         status=self.status, model=self.model)

    def __repr__(self) -> str:
        return (f"ModelCallError(code={self.code!r}, retryable={self.retryable}, status={self.status}, "
                f"model={self.model!r})")


_CONTEXT_TOO_LONG_HINTS = ("prompt is too long", "too many tokens", "context length", "context window")


def _api_message(exc: anthropic.APIStatusError) -> str:
    msg = getattr(exc, "api_message", None)
    if isinstance(msg, str) and msg:
        return msg
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
    return str(exc.message)


def _error_type(exc: anthropic.APIStatusError) -> str | None:
    body: Any = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        value = body["error"].get("type")
        return value if isinstance(value, str) else None
    return None


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    try:
        raw = exc.response.headers.get("retry-after")
        return float(raw) if raw is not None else None
    except (ValueError, AttributeError):
        return None


# An error sent inside a 200 stream (SSE `event: error`) carries its kind only in the
# body; the status is the stream's 200. These map the body's type to a status.
_TYPE_STATUS = {
    "overloaded_error": 529, "rate_limit_error": 429, "api_error": 500, "timeout_error": 504,
    "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "billing_error": 402,
}


def _classify_status(status: int, message: str) -> tuple[str, bool]:
    if status == 400:
        if any(h in message.lower() for h in _CONTEXT_TOO_LONG_HINTS):
            return "context_too_long", False
        return "bad_request", False
    if status in (401, 403):
        return "auth", False
    if status == 402:
        return "billing", False
    if status == 404:
        return "not_found", False
    if status == 408:
        return "timeout", True
    if status == 409:
        return "conflict", True
    if status == 413:
        return "context_too_long", False
    if status == 429:
        return "rate_limited", True
    if status == 529:
        return "model_overloaded", True
    if status >= 500:
        return "server_error", True
    return "bad_request", False


def _loaded(*names: str) -> Any:
    """The first of the modules `names` already imported, else None. An exception of the
    Anthropic SDK (or of its HTTP client) exists only once the SDK is imported, and this
    module must not import it: a process with the scripted model never loads it."""
    return next((sys.modules[n] for n in names if n in sys.modules), None)


def classify(exc: BaseException, model: str | None = None) -> ModelCallError:
    """Map any exception raised by a model call to a `ModelCallError`."""
    if isinstance(exc, ModelCallError):
        if exc.model is None:
            exc.model = model
        return exc
    anthropic = _loaded("anthropic")
    if anthropic is not None:
        known = _classify_sdk(anthropic, exc, model)
        if known is not None:
            return known
    # The SDK's HTTP client: a stream cut mid-body may surface as its own error.
    httpx = _loaded("httpx2", "httpx")
    timeouts = (httpx.TimeoutException, TimeoutError) if httpx is not None else (TimeoutError,)
    transport = (httpx.TransportError, ConnectionError) if httpx is not None else (ConnectionError,)
    if isinstance(exc, timeouts):
        return ModelCallError("timeout", f"the model API did not answer in time ({type(exc).__name__})",
                              True, model=model)
    if isinstance(exc, transport):
        return ModelCallError("connection", f"the model stream broke: {type(exc).__name__}: {exc}",
                              True, model=model)
    return ModelCallError("internal", f"{type(exc).__name__}: {exc}", False, model=model)


def _classify_sdk(anthropic: Any, exc: BaseException, model: str | None) -> ModelCallError | None:
    if isinstance(exc, anthropic.APIStatusError):
        message = _api_message(exc)
        status = exc.status_code
        if status < 400:  # an error event inside a streamed 200 response
            status = _TYPE_STATUS.get(_error_type(exc) or "", 500)
        code, retryable = _classify_status(status, message)
        return ModelCallError(code, message, retryable, status=status, model=model, retry_after_s=_retry_after(exc))
    if isinstance(exc, anthropic.APITimeoutError):
        return ModelCallError("timeout", "the model API did not answer in time", True, model=model)
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelCallError("connection", f"cannot reach the model API: {exc.message}", True, model=model)
    return None
