"""The fallback chain: ask the next model when one fails.

For each model in order (primary first)::

    not available now (`Model.unavailable`: the fleet-wide circuit breaker open,
    breaker.py) -> skipped without a call, its refusal the reason of the switch
    ask it (`ModelStarted`) -> ok: done
                            -> an error `fallback_on` accepts (by default a retryable one,
                               once the model's own retries are spent: retrying.py):
                               switch to the next model (`ModelSwitched`)
                            -> any other error (400, auth, context too long): stop at
                               once - it would fail the same way on every model, and
                               hammering fallbacks helps nobody

`FallbackModel` is itself a `Model`: the chain is one model to whoever runs it. Its
`Finished` carries the switches made; a failure leaves as the last error, its
`fallbacks` set to them.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import aclosing

from .errors import ModelCallError
from .model import Model
from .model_call import ModelRequest
from .model_events import Finished, ModelStarted, ModelStream, ModelSwitched, retracting
from .retrying import ErrorRule, is_retryable


def switch_reason(err: ModelCallError) -> str:
    return err.code if not err.message else f"{err.code}: {err.message}"


class FallbackModel(Model):
    """Runs a request over `models` (model id -> the model asked for it, primary first)."""

    name = "fallback"

    def __init__(self, models: Mapping[str, Model], *, fallback_on: ErrorRule = is_retryable) -> None:
        self.models = dict(models)
        self.fallback_on = fallback_on

    async def stream(self, request: ModelRequest) -> ModelStream:
        if not self.models:
            raise ModelCallError("bad_request", "no model to call", False, model=request.model)
        switches: list[dict[str, str]] = []
        last_error: ModelCallError | None = None
        previous = ""
        for model_id, model in self.models.items():
            if last_error is not None:
                switch = ModelSwitched(previous, model_id, switch_reason(last_error))
                switches.append(switch.as_dict())
                yield switch
            previous = model_id
            refusal = model.unavailable()
            if refusal is not None:
                last_error = refusal
                continue
            yield ModelStarted(model_id, model.gated())
            try:
                async with aclosing(retracting(model.stream(request.for_model(model_id)), model_id)) as events:
                    async for event in events:
                        yield Finished(event.response, list(switches)) if isinstance(event, Finished) else event
                return
            except ModelCallError as err:
                err.model = err.model or model_id
                last_error = err
                if not self.fallback_on(err):
                    err.fallbacks = switches
                    raise
        assert last_error is not None
        last_error.fallbacks = switches
        raise last_error
