"""Pure translation between the llm service's envelopes and the provider interface.

`Generate` (from memory) -> `ModelRequest`; the chain's `Finished` (model_events.py) or a
`ModelCallError` -> `GenerationResult` (to the router). The result copies the request's identity
(session, run, step, turn, trace) so the router can match it without a lookup.
"""

from __future__ import annotations

from typing import Any

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import Generate, GenerationResult

from .errors import ModelCallError
from .model_call import ModelRequest
from .model_events import Finished


def record_key(env: Generate) -> str:
    """Step-store name of a generation's record and claim (in its session's slot)."""
    return keys.generation_step(env.session_id, env.step_id)


def model_chain(env: Generate, default_model: str) -> list[str]:
    """Primary first, then fallbacks, without repeats; the default model when none is given."""
    chain: list[str] = []
    for model in env.models:
        if model and model not in chain:
            chain.append(model)
    return chain or [default_model]


def model_request(env: Generate, default_model: str) -> ModelRequest:
    return ModelRequest(model=model_chain(env, default_model)[0], messages=env.messages,
                        max_tokens=env.max_tokens, system=env.system, tools=list(env.tools),
                        temperature=env.temperature, prompt_cache=env.prompt_cache == "auto",
                        cache_ttl=env.prompt_cache_ttl,
                        stable_system=env.stable_system, notes=list(env.notes))


def _identity(env: Generate) -> dict[str, Any]:
    # extra_usage (memory's summaries for this step) rides along to the router, which
    # counts it in the run's budget whether the model call succeeded or not.
    return {"session_id": env.session_id, "run_id": env.run_id, "step_id": env.step_id,
            "turn": env.turn, "trace": dict(env.trace), "extra_usage": env.extra_usage,
            "extra_model": env.extra_model}


def result_ok(env: Generate, outcome: Finished) -> GenerationResult:
    resp = outcome.response
    return GenerationResult(**_identity(env), ok=True, message=resp.message, stop_reason=resp.stop_reason,
                            model=resp.model, usage=resp.usage, fallbacks=list(outcome.fallbacks))


def result_failed(env: Generate, error: ModelCallError) -> GenerationResult:
    return GenerationResult(**_identity(env), ok=False, model=error.model, error=error.to_step_error(),
                            fallbacks=list(error.fallbacks))
