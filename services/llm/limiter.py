"""The model limits in the call path: a request waits for the fleet-wide budget
(shared/stores/model_budget.py) before it goes to the provider, and gives its share back after.

    LimitedModel(CircuitBreakerModel(InstrumentedModel(<provider>)))   inside the retries

Per request (each retry is a request of its own)::

    admit -> admitted: `Admitted`, the call, then release (its share of `max_concurrent`,
             and its token counts corrected from the usage); a 429 or 529 with retry-after
             sets the key's cooldown for every replica
          -> not yet: `Throttled` (when the reason changes), then sleep until woken (a
             release names the waiters that may go, on `<prefix>.rpc.llm.limits_wake`) or
             until the expected wait, at most WAITER_TTL_S / 3, and ask again
          -> waited `LOOPWIRE_MODEL_WAIT_MAX_S`: fails as a rate limit the retries leave
             to the next fallback

While a generation waits, its session's `model_wait` key says so (`session.get` answers
`waiting_for_model`). One `ModelLimiter` per llm replica keeps the leases it holds alive
(renewed every LEASE_S / 3): a replica killed with requests in flight gives their share
back when the leases expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from loopwire.shared.contract import keys
from loopwire.shared.contract.messages import Message
from loopwire.shared.contract.model_limits import LEASE_S, ModelLimit, ModelLimits
from loopwire.shared.contract.subjects import tenant_of
from loopwire.shared.observability import metrics
from loopwire.shared.runtime.periodic import PeriodicSweep
from loopwire.shared.stores.model_budget import WAITER_TTL_S, Admission, ModelLimitStore, wake_notice

from .errors import ModelCallError
from .model import Model
from .model_call import ModelRequest
from .model_events import Admitted, Finished, ModelStream, Throttled
from .wrapper import WrapperModel

if TYPE_CHECKING:
    from loopwire.shared.runtime.service_context import ServiceContext

    from .settings import LlmSettings

log = logging.getLogger("loopwire.llm.limits")

COOLDOWN_STATUSES = {"rate_limited": "429", "model_overloaded": "529"}
_JITTER = random.Random()


class ModelLimiter(PeriodicSweep):
    """One llm replica's side of the model limits; its sweep renews the leases it holds."""

    interval_s = LEASE_S / 3
    name = "llm-limit-leases"
    log = log

    def __init__(
        self,
        table: ModelLimits,
        store: ModelLimitStore,
        *,
        wake_subject: str,
        wait_max_s: float,
        redis: Any,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.table = table
        self.store = store
        self.wake_subject = wake_subject
        self.wait_max_s = wait_max_s
        self.redis = redis
        self.clock = clock
        self._nc: Any = None
        self._sub: Any = None
        self._waiters: dict[str, asyncio.Event] = {}
        self._held: dict[str, dict[str, int]] = {}
        """limit key -> lease -> requests of this replica under it (renewed together)."""

    def rule(self, model: str) -> tuple[str, ModelLimit] | None:
        return self.table.for_model(model)

    async def start_with(self, nc: Any) -> None:
        self._nc = nc
        self._sub = await nc.subscribe(self.wake_subject, cb=self._on_wake)
        self.start()

    async def stop(self) -> None:
        await super().stop()
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    # -- waiting -------------------------------------------------------------------------------
    async def _on_wake(self, msg: Any) -> None:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            for lease in json.loads(msg.data).get("leases", []):
                event = self._waiters.get(lease)
                if event is not None:
                    event.set()

    def expect(self, lease: str) -> None:
        """Listen for `lease`'s wake before its first admission is asked: a release that
        names it while that answer is on its way is not missed."""
        self._waiters.setdefault(lease, asyncio.Event())

    async def pause(self, lease: str, admission: Admission, remaining_s: float) -> None:
        """Until this waiter may ask again: woken (also while it was asking), its expected
        wait over, or a poll's time."""
        event = self._waiters.setdefault(lease, asyncio.Event())
        poll = WAITER_TTL_S / 3
        wait = min(admission.wait_s, poll) if admission.wait_s > 0 else poll * _JITTER.uniform(0.8, 1.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), max(0.01, min(wait, remaining_s)))
        event.clear()

    def done_waiting(self, lease: str) -> None:
        self._waiters.pop(lease, None)

    async def mark_waiting(self, sid: str, waiting: bool) -> None:
        """The session's `model_wait` key: set while one of its generations waits."""
        try:
            if waiting:
                await self.redis.set(keys.model_wait(sid), "1", ex=int(WAITER_TTL_S * 2))
            else:
                await self.redis.delete(keys.model_wait(sid))
        except Exception as exc:  # only `session.get`'s activity is less precise
            log.debug("model_wait key of %s: %r", sid, exc)

    # -- holding and giving back -----------------------------------------------------------------
    def hold(self, key: str, lease: str) -> None:
        held = self._held.setdefault(key, {})
        held[lease] = held.get(lease, 0) + 1
        metrics.child(metrics.MODEL_IN_FLIGHT, key=key).inc()

    async def release(
        self, key: str, limit: ModelLimit, lease: str, *, second: int, input_delta: int, output_delta: int
    ) -> None:
        held = self._held.get(key, {})
        if held.get(lease, 0) <= 1:
            held.pop(lease, None)
        else:
            held[lease] -= 1
        metrics.child(metrics.MODEL_IN_FLIGHT, key=key).dec()
        try:
            woken = await self.store.release(
                key, limit, lease, second=second, input_delta=input_delta, output_delta=output_delta
            )
            if woken and self._nc is not None:
                await self._nc.publish(self.wake_subject, wake_notice(key, woken))
        except Exception as exc:  # the lease expires by itself; the waiters poll
            log.warning("model limits: the release of %s failed: %r", key, exc)

    async def sweep(self) -> None:
        for key, held in list(self._held.items()):
            if held:
                await self.store.renew(key, list(held))

    async def cool_down(self, key: str, err: ModelCallError) -> None:
        metrics.child(metrics.MODEL_RATE_LIMITED, key=key, status=COOLDOWN_STATUSES[err.code]).inc()
        if err.retry_after_s:
            try:
                await self.store.cool_down(key, err.retry_after_s)
            except Exception as exc:
                log.warning("model limits: the cooldown of %s failed: %r", key, exc)


class LimitedModel(WrapperModel):
    """`wrapped`, each request admitted by the model limits of `key` first."""

    def __init__(
        self,
        wrapped: Model,
        limiter: ModelLimiter,
        key: str,
        *, limit: ModelLimit,
        session_id: str,
        step_id: str,
        input_tokens: int,
    ) -> None:
        super().__init__(wrapped)
        self.limiter = limiter
        self.key = key
        self.limit = limit
        self.session_id = session_id
        self.step_id = step_id
        self.input_tokens = input_tokens

    def gated(self) -> bool:
        return True

    async def stream(self, request: ModelRequest) -> ModelStream:
        limiter, key = self.limiter, self.key
        lease = f"{self.step_id}|{request.model}"
        tenant = tenant_of(self.session_id) or "*"
        began = limiter.clock()
        admission: Admission | None = None
        reason = ""
        limiter.expect(lease)
        try:
            while True:
                admission = await limiter.store.admit(
                    key,
                    self.limit,
                    lease,
                    tenant=tenant,
                    input_tokens=self.input_tokens,
                    output_tokens=request.max_tokens,
                )
                if admission.admitted:
                    break
                waited = limiter.clock() - began
                if waited >= limiter.wait_max_s:
                    err = ModelCallError(
                        "rate_limited",
                        f"waited {waited:.0f} s for the model limits of {key} ({admission.reason})",
                        True,
                        model=request.model,
                    )
                    err.same_model_spent = True
                    raise err
                if admission.reason != reason:
                    if not reason:
                        await limiter.mark_waiting(self.session_id, True)
                    reason = admission.reason
                    metrics.child(metrics.MODEL_THROTTLED, key=key, reason=reason).inc()
                    yield Throttled(request.model, reason, round(admission.wait_s, 3))
                await limiter.pause(lease, admission, limiter.wait_max_s - waited)
        finally:
            limiter.done_waiting(lease)
            if admission is None or not admission.admitted:
                with contextlib.suppress(Exception):
                    await asyncio.shield(limiter.store.leave(key, lease))
            if reason:
                await limiter.mark_waiting(self.session_id, False)
        metrics.child(metrics.MODEL_ADMITTED, key=key).inc()
        metrics.child(metrics.MODEL_WAIT_SECONDS, key=key).observe(limiter.clock() - began)
        limiter.hold(key, lease)
        used: Finished | None = None
        try:  # from here the lease is this replica's to renew and give back, however the call ends
            yield Admitted(request.model)
            async with aclosing(self.wrapped.stream(request)) as events:
                async for event in events:
                    if isinstance(event, Finished):
                        used = event
                    yield event
        except ModelCallError as err:
            if err.code in COOLDOWN_STATUSES:
                await limiter.cool_down(key, err)
            raise
        finally:
            usage = used.response.usage if used is not None else None
            input_delta = usage.total_input() - self.input_tokens if usage is not None else 0
            output_delta = (
                usage.output_tokens - request.max_tokens if usage is not None else -request.max_tokens
            )
            await asyncio.shield(
                limiter.release(
                    key,
                    self.limit,
                    lease,
                    second=admission.second,
                    input_delta=input_delta,
                    output_delta=output_delta,
                )
            )


def estimated_input(system: str | None, messages: list[Message], tools: list[Any]) -> int:
    """A request's input tokens when the memory service sent no count: about four
    characters a token, as the provider's tokenizers average on English and JSON."""
    chars = (
        len(system or "")
        + len(json.dumps(messages, default=str))
        + len(json.dumps([t.model_dump() if hasattr(t, "model_dump") else t for t in tools], default=str))
    )
    return max(1, chars // 4)


def limiter_from_settings(ctx: ServiceContext[LlmSettings]) -> ModelLimiter | None:
    """The replica's limiter, when the operator set LOOPWIRE_MODEL_LIMITS."""
    table = ctx.settings.model_limits_table()
    if not table.entries:
        return None
    return ModelLimiter(
        table,
        ModelLimitStore(ctx.redis, ctx.replication),
        wake_subject=ctx.subjects.llm_limits_wake,
        wait_max_s=ctx.settings.model_wait_max_s,
        redis=ctx.redis,
    )
