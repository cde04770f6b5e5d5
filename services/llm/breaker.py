"""A circuit breaker per model, shared by every llm replica through Redis, and the
wrapper model that puts a model behind it.

    closed --(failures >= threshold)--> open --(cool-down over)--> half-open
    half-open: ONE caller (fleet-wide) claims the probe; others still skip the model
      probe succeeds -> closed          probe fails -> open for another cool-down

Only retryable failures count: a 400 says nothing about a model's health, a 529 does.
The state lives in a `BreakerStore` (breaker_store.py: a Redis hash per model, or one
process's memory); time is the caller's clock (`clock`, seconds).

The shared state is async (Redis), a model's availability is asked synchronously, so a
request gets its own `RunGate`: `await breaker.gate(models)` reads the state of the
request's models in one go and claims the half-open probe of any model that is due one;
`allow()` then answers from that snapshot; `record_*()` write through in background
tasks at once (other replicas see a failure while this request still retries); and
`await gate.close()` waits for those writes and releases probe claims the request never
used (its primary answered before a fallback's turn came). `CircuitBreakerModel` is a
`WrapperModel` (wrapper.py) that asks the gate: the fallback chain (fallback.py) skips a
model whose breaker is open (`Model.unavailable`, a `circuit_open` error) and the
wrapper records each call's outcome (each retry's, inside RetryingModel: step_chain.py).

A healthy model costs no Redis call per request: a clean `closed` verdict (no failure
counted) is reused in process for `CLOSED_REUSE_S`, and a success is written only when the
request's snapshot saw failures to reset (a success on a clean count changes nothing).
A failure this process records drops its reused verdict at once, so its next request
reads the count again; another replica's failures are seen at most `CLOSED_REUSE_S` late.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from loopwire.shared.observability import metrics

from .breaker_store import (
    CLOSED,
    FAILING,
    HALF_OPEN,
    OPEN,
    BreakerPolicy,
    BreakerStore,
    MemoryBreakerStore,
    RedisBreakerStore,
)
from .errors import ModelCallError
from .model import Model
from .model_call import ModelRequest
from .model_events import Finished, ModelStream
from .wrapper import WrapperModel

if TYPE_CHECKING:
    from .settings import LlmSettings

log = logging.getLogger("loopwire.llm.breaker")

Clock = Callable[[], float]

CLOSED_REUSE_S = 1.0
"""How long a clean `closed` verdict is reused in process without asking the store."""


class BreakerGate(Protocol):
    """One request's view of the breakers, asked synchronously (`RunGate`)."""

    def allow(self, model: str) -> bool: ...

    def record_success(self, model: str) -> None: ...

    def record_failure(self, model: str) -> None: ...


class CircuitBreaker:
    """The fleet-wide breaker; `await gate(models)` gives one request its BreakerGate."""

    def __init__(self, store: BreakerStore, policy: BreakerPolicy | None = None, clock: Clock = time.time) -> None:
        self.store = store
        self.policy = policy or BreakerPolicy()
        self.clock = clock
        self._closed_until: dict[str, float] = {}
        """model -> until when (clock) its last clean `closed` verdict is reused."""

    @classmethod
    def disabled(cls) -> CircuitBreaker:
        """A breaker that allows every model and records nothing (failure_threshold 0)."""
        return cls(MemoryBreakerStore(), BreakerPolicy(failure_threshold=0))

    @property
    def enabled(self) -> bool:
        return self.policy.failure_threshold > 0

    async def gate(self, models: list[str]) -> RunGate:
        gate = RunGate(self)
        if not self.enabled:
            return gate
        now = self.clock()
        for model in dict.fromkeys(models):
            if now < self._closed_until.get(model, 0.0):
                gate.verdicts[model] = CLOSED  # healthy a moment ago: no need to ask again
                continue
            try:
                verdict = await self.store.acquire(model, now, gate.token, policy=self.policy)
            except Exception as exc:  # Redis away: fail open, a breaker must not stop traffic
                log.warning("breaker state of %s unavailable (%s): allowing it", model, exc)
                verdict = FAILING  # unknown: a success is written, as before
            if verdict == CLOSED:
                self._closed_until[model] = now + CLOSED_REUSE_S
            else:
                self._closed_until.pop(model, None)
            gate.verdicts[model] = verdict
            if verdict == "probe":
                gate.probes.add(model)
            metrics.set_breaker_state(model, {"probe": HALF_OPEN, FAILING: CLOSED}.get(verdict, verdict))
        return gate

    @asynccontextmanager
    async def guarding(self, models: list[str]) -> AsyncIterator[RunGate]:
        """The gate of one request over `models`, closed when the request is done."""
        gate = await self.gate(models)
        try:
            yield gate
        finally:
            await gate.close()

    def forget(self, model: str) -> None:
        """Stop reusing `model`'s closed verdict (this process just saw it fail)."""
        self._closed_until.pop(model, None)

    async def state(self, model: str) -> str:
        return await self.store.state(model, self.clock())


@dataclass(eq=False)
class RunGate:
    """The BreakerGate of one request."""

    breaker: CircuitBreaker
    _token: str | None = None
    verdicts: dict[str, str] = field(default_factory=dict)
    probes: set[str] = field(default_factory=set)
    """Models whose half-open probe this request holds and has not used yet."""
    _writes: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def token(self) -> str:
        """This request's id in the breaker's store, drawn when the store is first asked:
        a request whose models' closed verdicts are reused never asks, and draws none."""
        if self._token is None:
            self._token = uuid.uuid4().hex
        return self._token

    def allow(self, model: str) -> bool:
        return self.verdicts.get(model, CLOSED) != OPEN

    def record_success(self, model: str) -> None:
        self._write(model, True)

    def record_failure(self, model: str) -> None:
        self._write(model, False)

    def _write(self, model: str, ok: bool) -> None:
        if not self.breaker.enabled:
            return
        self.probes.discard(model)  # the probe was used: its outcome settles the state
        if ok and self.verdicts.get(model) == CLOSED:
            return  # nothing counted to reset: the write would change nothing
        if not ok:
            self.breaker.forget(model)
            if self.verdicts.get(model) == CLOSED:
                self.verdicts[model] = FAILING  # a later success of this request resets the count
        self._writes.append(asyncio.get_running_loop().create_task(self._record(model, ok)))

    async def _record(self, model: str, ok: bool) -> None:
        b = self.breaker
        try:
            state = await b.store.record(model, ok, b.clock(), token=self.token, policy=b.policy)
        except Exception as exc:
            log.warning("breaker outcome of %s not recorded (%s)", model, exc)
            return
        if not ok:
            b.forget(model)  # a verdict read while this write was on its way is stale
        metrics.set_breaker_state(model, state)
        if state == OPEN and self.verdicts.get(model) != OPEN:
            log.warning("circuit breaker for %s opened for %.0fs", model, b.policy.cooldown_s)

    async def close(self) -> None:
        """Wait for the outcome writes; give back probe claims this request never used."""
        if self._writes:
            await asyncio.gather(*self._writes, return_exceptions=True)
            self._writes.clear()
        for model in list(self.probes):
            try:
                await self.breaker.store.release(model, self.token)
            except Exception as exc:
                log.warning("breaker probe of %s not released (%s); it expires by itself", model, exc)
        self.probes.clear()


class CircuitBreakerModel(WrapperModel):
    """`wrapped` (the model `model_id`) behind one request's gate: unavailable while its
    breaker is open, and every call's outcome recorded (a retryable failure counts, any
    success resets the count)."""

    def __init__(self, wrapped: Model, model_id: str, gate: BreakerGate) -> None:
        super().__init__(wrapped)
        self.model_id = model_id
        self.gate = gate

    def unavailable(self) -> ModelCallError | None:
        if not self.gate.allow(self.model_id):
            return ModelCallError("circuit_open", f"{self.model_id} is failing; skipped for now",
                                  True, model=self.model_id)
        return self.wrapped.unavailable()

    async def stream(self, request: ModelRequest) -> ModelStream:
        try:
            async with aclosing(self.wrapped.stream(request)) as events:
                async for event in events:
                    if isinstance(event, Finished):
                        self.gate.record_success(self.model_id)
                    yield event
        except ModelCallError as err:
            if err.retryable:
                # A 400 says nothing about the model's health; a 529 does.
                self.gate.record_failure(self.model_id)
            raise


def breaker_from_settings(settings: LlmSettings, redis: Any, clock: Clock = time.time, *,
                          replication: Any = None) -> CircuitBreaker:
    policy = BreakerPolicy(failure_threshold=settings.llm_breaker_failures, cooldown_s=settings.llm_breaker_cooldown_s,
                           probe_ttl_s=settings.llm_breaker_probe_ttl_s)
    return CircuitBreaker(RedisBreakerStore(redis, replication), policy, clock)
