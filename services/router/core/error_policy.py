"""Error policy: every failed step, classified in one place.

By the time a failure reaches the router, the llm service has already retried what is
worth retrying on one model (backoff with jitter) and switched to the fallbacks. What is
left to decide is what the *run* does:

| failure | action |
|---|---|
| a tool call failed (error result, timeout, unknown tool, denied) | `continue`: it is a result; the model reads it and adapts |
| generation `cancelled` while it is still the run's pending step (a cancel notice meant for an abandoned step reached it) | `continue`: generate again (bounded by `MAX_STEP_RETRIES`) |
| `context_too_long` | `retry_reduced_context`: the same generation with `reduce_context` set, so memory shrinks the history (`context_retries` times per run), then `terminate` |
| `not_found` (the API does not know the model id) | `switch_model` to the run's next model, if it has one, else `terminate` |
| anything else: retryable errors that outlived every retry and fallback (`model_overloaded`, `rate_limited`, `server_error`, `timeout`, `connection`, `circuit_open`), `bad_request`, `auth`, `billing`, `internal` | `terminate`: an `error` event, then `run.ended` `failed` (or, for a run already converging, the status it converges to, with its best answer) |

Each non-terminal action is still visible: the core emits an `error` event with the
failure's `code` and `message` and the chosen `action` (loopwire's addition, docs/protocol.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loopwire.shared.contract.envelopes import StepError
from loopwire.shared.contract.run_state import RunState

from .config import CoreConfig

Action = Literal["continue", "retry_reduced_context", "switch_model", "terminate"]

MAX_STEP_RETRIES = 2


@dataclass(frozen=True)
class Verdict:
    action: Action
    code: str
    message: str


def classify_generation_failure(error: StepError | None, run: RunState, cfg: CoreConfig) -> Verdict:
    code = error.code if error else "model_error"
    message = error.message if error else "the model call failed without an error"
    if run.limits.converging is not None:
        return Verdict("terminate", code, message)  # the last answer failed: end with what we have
    if code == "cancelled":
        action: Action = "continue" if run.limits.step_retries < MAX_STEP_RETRIES else "terminate"
        return Verdict(action, code, message)
    if code == "context_too_long":
        action = "retry_reduced_context" if run.limits.context_retries < cfg.context_retries else "terminate"
        return Verdict(action, code, message)
    if code == "not_found" and run.limits.model_offset + 1 < len(run.config.models):
        return Verdict("switch_model", code, message)
    return Verdict("terminate", code, message)

