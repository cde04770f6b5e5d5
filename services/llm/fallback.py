"""The fallback chain: retry a model with backoff, then switch to the next one.

For each model id in order::

    attempt -> ok: done
            -> retryable error: back off (exponential, jittered, at least the server's
               retry-after) and try again, up to `max_retries` times; then switch to the
               next model, recording {"from_model", "to_model", "reason"}
            -> non-retryable error (400, auth, context too long): stop at once - it would
               fail the same way on every model, and hammering fallbacks helps nobody

A model that is not available now (`Model.unavailable`: the fleet-wide circuit breaker
open, breaker.py) is skipped without a call, its refusal the reason of the switch.
`FallbackModel` is itself a `Model`: the chain is one model to whoever runs it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from .errors import ModelCallError
from .model import Model, ModelRequest, ModelResponse, TextCallback

SwitchCallback = Callable[[dict[str, str]], Awaitable[None]]
"""Called with each model switch as it happens."""
DiscardCallback = Callable[[str, str], Awaitable[None]]
"""Called with (model, reason) when an attempt that already streamed text failed: the
text pieces of that attempt are void (the service emits `retracted`)."""
StartCallback = Callable[[str], Awaitable[None]]
"""Called with a model's id when the chain starts asking it (not again for its retries)."""
Sleep = Callable[[float], Awaitable[None]]


@dataclass
class RetryPolicy:
    max_retries: int = 2
    """Retries per model after the first attempt (so `max_retries + 1` attempts)."""
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0

    def delay(self, retry: int, retry_after_s: float | None = None, rng: random.Random | None = None) -> float:
        """Backoff before retry number `retry` (0-based): half fixed, half random ("equal
        jitter"), so replicas that failed together do not retry together."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (2 ** retry))
        delay = ceiling / 2 + (rng or random).uniform(0, ceiling / 2)
        if retry_after_s is not None:
            delay = max(delay, min(retry_after_s, self.max_delay_s))
        return delay


@dataclass
class FallbackResult:
    response: ModelResponse
    fallbacks: list[dict[str, str]] = field(default_factory=list)
    """Switches made on the way: {"from_model", "to_model", "reason"}."""
    attempts: int = 1
    """Model calls made in all (retries included)."""


_JITTER = random.Random()
"""The retries' jitter, one generator for every chain: a chain is built per generation, and
seeding a new generator (from os.urandom) cost more than the rest of its set-up."""


class FallbackModel(Model):
    """Runs a request over `models` (primary first) built by `factory`.

    `run()` returns the response with the switches made; `generate()` (the `Model`
    interface) returns the response only. On failure the last error is raised with its
    `fallbacks` attribute set to the switches made before it.
    """

    name = "fallback"

    def __init__(self, models: list[str], factory: Callable[[str], Model], policy: RetryPolicy | None = None,
                 sleep: Sleep = asyncio.sleep, rng: random.Random | None = None) -> None:
        self.models = list(models)
        self.factory = factory
        self.policy = policy or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or _JITTER

    async def generate(self, request: ModelRequest, on_text: TextCallback | None = None) -> ModelResponse:
        return (await self.run(request, on_text)).response

    async def run(self, request: ModelRequest, on_text: TextCallback | None = None,
                  on_switch: SwitchCallback | None = None,
                  on_discard: DiscardCallback | None = None,
                  on_start: StartCallback | None = None) -> FallbackResult:
        if not self.models:
            raise ModelCallError("bad_request", "no model to call", False, None, request.model)
        switches: list[dict[str, str]] = []
        attempts = 0
        last_error: ModelCallError | None = None
        for index, model_id in enumerate(self.models):
            if index > 0 and last_error is not None:
                switch = {"from_model": self.models[index - 1], "to_model": model_id,
                          "reason": last_error.code if not last_error.message
                          else f"{last_error.code}: {last_error.message}"}
                switches.append(switch)
                if on_switch is not None:
                    await on_switch(switch)
            model = self.factory(model_id)
            refusal = model.unavailable()
            if refusal is not None:
                last_error = refusal
                continue
            if on_start is not None:
                await on_start(model_id)
            for retry in range(self.policy.max_retries + 1):
                attempts += 1
                streamed = False

                async def forward(piece: str) -> None:
                    nonlocal streamed
                    streamed = True
                    if on_text is not None:
                        await on_text(piece)

                try:
                    response = await model.generate(request.for_model(model_id), forward)
                except ModelCallError as err:
                    err.model = err.model or model_id
                    last_error = err
                    if streamed and on_discard is not None:
                        await on_discard(model_id, f"{err.code}: {err.message}")
                    if not err.retryable:
                        err.fallbacks = switches
                        raise
                    if retry < self.policy.max_retries:
                        await self._sleep(self.policy.delay(retry, err.retry_after_s, self._rng))
                    continue
                return FallbackResult(response=response, fallbacks=switches, attempts=attempts)
        assert last_error is not None
        last_error.fallbacks = switches
        raise last_error
