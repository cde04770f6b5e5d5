"""Retries of one model: ask the same model again after a failure that may pass.

    attempt -> ok: done
            -> an error `retry_on` accepts (by default a retryable one: 429, 529, 5xx, a
               timeout, a dropped stream): yield `Retrying`, back off (exponential,
               jittered, at least the server's retry-after) and try again, up to
               `max_retries` times; then the error leaves
            -> any other error (400, auth, context too long): leaves at once

An attempt that failed after streaming text has its text retracted (`Retracted`,
model_events.py) before the retry. `RetryingModel` is a `WrapperModel`: the llm service
puts one around each model of a step's fallback chain (step_chain.py), so moving to the
next model (fallback.py) stays apart from asking one again.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass

from .errors import ModelCallError
from .model import Model
from .model_call import ModelRequest
from .model_events import ModelStream, Retrying, failure_reason, retracting
from .wrapper import WrapperModel

Sleep = Callable[[float], Awaitable[None]]
ErrorRule = Callable[[ModelCallError], bool]
"""Which failures a wrapper acts on (retries, or moves to the next model)."""


def is_retryable(err: ModelCallError) -> bool:
    """The default rule: the failures that the same call may not meet again (errors.py)."""
    return err.retryable


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


_JITTER = random.Random()
"""The retries' jitter, one generator for every wrapper: wrappers are built per generation,
and seeding a new generator (from os.urandom) cost more than the rest of their set-up."""


class RetryingModel(WrapperModel):
    """`wrapped`, asked again (after a backoff) on the failures `retry_on` accepts."""

    def __init__(self, wrapped: Model, policy: RetryPolicy | None = None, *, sleep: Sleep = asyncio.sleep,
                 rng: random.Random | None = None, retry_on: ErrorRule = is_retryable) -> None:
        super().__init__(wrapped)
        self.policy = policy or RetryPolicy()
        self.retry_on = retry_on
        self._sleep = sleep
        self._rng = rng or _JITTER

    async def stream(self, request: ModelRequest) -> ModelStream:
        for retry in range(self.policy.max_retries + 1):
            try:
                async with aclosing(retracting(self.wrapped.stream(request), request.model)) as events:
                    async for event in events:
                        yield event
                return
            except ModelCallError as err:
                if not self.retry_on(err) or err.same_model_spent or retry == self.policy.max_retries:
                    raise
                delay = self.policy.delay(retry, err.retry_after_s, self._rng)
                reason = failure_reason(err)
            yield Retrying(request.model, retry + 1, delay, reason)
            await self._sleep(delay)
