"""The model a step runs: its fallback chain, each model of it wrapped in the behaviours
every call gets.

    FallbackModel({model id: RetryingModel([LimitedModel](CircuitBreakerModel(InstrumentedModel(<provider>))))})

Innermost first: each call (each retry of each model) gets its span and latency metrics
(instrumented_model.py) and its outcome counted by the fleet-wide breaker (breaker.py);
a model under LOOPWIRE_MODEL_LIMITS has each request admitted by the fleet-wide budget
first (limiter.py); the retries ask the same model again (retrying.py); the chain moves to the next model
(fallback.py), skipping one whose breaker is open. The run's generations (service.py) and
the memory service's summaries (summarize.py) run the same chain.
"""

from __future__ import annotations

from collections.abc import Callable

from loopwire.shared.contract.envelopes import Generate

from .breaker import BreakerGate, CircuitBreakerModel
from .fallback import FallbackModel
from .instrumented_model import InstrumentedModel
from .limiter import LimitedModel, ModelLimiter, estimated_input
from .model import Model
from .retrying import RetryingModel, RetryPolicy, Sleep


def step_model(env: Generate, model_ids: list[str], provider: Callable[[str], Model], *, gate: BreakerGate,
               policy: RetryPolicy, sleep: Sleep, limiter: ModelLimiter | None = None) -> FallbackModel:
    """The chain over `model_ids` for the step `env`, each model `provider(model id)`
    behind the request's breaker `gate` (and the model limits of `limiter`)."""
    models: dict[str, Model] = {}
    for model_id in model_ids:
        model: Model = CircuitBreakerModel(InstrumentedModel(provider(model_id), env), model_id, gate)
        rule = limiter.rule(model_id) if limiter is not None else None
        if limiter is not None and rule is not None:
            tokens = env.input_tokens or estimated_input(env.system, env.messages, env.tools)
            key, limit = rule
            model = LimitedModel(model, limiter, key, limit=limit, session_id=env.session_id, step_id=env.step_id,
                                 input_tokens=tokens)
        models[model_id] = RetryingModel(model, policy, sleep=sleep)
    return FallbackModel(models)
