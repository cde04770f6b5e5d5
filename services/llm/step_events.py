"""What a client sees of one generation: the model events (model_events.py) of a step's
chain as session events on the bus.

    TextDelta      -> `text.delta` {turn, text}
    ModelStarted   -> `generating` {turn, model}; for a model under the model limits
                      (`gated`), at its first `Admitted` instead
    Throttled      -> `model.throttled` {model, reason, wait_s}, before that `generating`
    ModelSwitched  -> `model.fallback` {from_model, to_model, reason}, keyed per switch, and
                      the fallback counter (step_metrics.py)
    Retracted      -> `retracted` {turn, reason}, keyed per attempt and discard
    Retrying       -> nothing (the backoff is the chain's business)

The events go out in their order behind the model's stream, not in its way: each is
queued and a sender task stores (one Redis call for what queued up meanwhile) and
publishes them, so a model's tokens never wait for a round trip to Redis, and a step's
`generating` is stored while the model runs and its result is recorded. `sent()` is the
step's barrier: its result goes to the router only after every event of the step is out
(the router's next events must follow them), and the step fails as before if one could
not be sent.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import cast

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import Generate
from loopwire.shared.contract.event_fields import (
    EventFields,
    GeneratingFields,
    ModelFallbackFields,
    ModelThrottledFields,
    RetractedFields,
    TextDeltaFields,
    ThrottleReason,
)
from loopwire.shared.contract.protocol import EPHEMERAL_KINDS
from loopwire.shared.runtime.bus import Bus, EventItem

from .model_events import (
    Admitted,
    Finished,
    ModelStarted,
    ModelStream,
    ModelSwitched,
    Retracted,
    TextDelta,
    Throttled,
)
from .step_metrics import count_fallback


class StepEvents:
    """The events of the step `env`, claimed for the `attempt`th time."""

    def __init__(self, bus: Bus, env: Generate, attempt: int) -> None:
        self.bus = bus
        self.env = env
        self.attempt = attempt
        self.streamed = False
        """Whether any text reached the client (a cancelled step retracts it)."""
        self._switches = 0
        self._discards = 0
        self._queue: list[EventItem] = []
        """The events waiting for the sender."""
        self._unsent_kept = False
        """A queued or sending event is one the transcript keeps (not ephemeral)."""
        self._sender: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None

    async def follow(self, events: ModelStream) -> Finished:
        """Queue the events of `events` as they come; the `Finished` that ends it."""
        env = self.env
        outcome: Finished | None = None
        gated: str | None = None
        """A gated model whose `generating` waits for its admission."""
        throttles = 0
        async with aclosing(events):
            async for event in events:
                match event:
                    case TextDelta(text=text):
                        self.streamed = True
                        self.emit("text.delta", TextDeltaFields(turn=env.turn, text=text))
                    case ModelStarted(model=model, gated=True):
                        gated = model
                    case ModelStarted(model=model):
                        self.emit("generating", GeneratingFields(turn=env.turn, model=model))
                    case Throttled(model=model, reason=reason, wait_s=wait_s):
                        throttles += 1
                        self.emit("model.throttled", key=message_ids.throttle_key(env.step_id, self.attempt, throttles),
                                  # The limit script names one of the documented reasons (limiter.py).
                                  fields=ModelThrottledFields(turn=env.turn, model=model,
                                                              reason=cast(ThrottleReason, reason), wait_s=wait_s))
                    case Admitted(model=model) if model == gated:
                        gated = None
                        self.emit("generating", GeneratingFields(turn=env.turn, model=model))
                    case ModelSwitched(from_model=from_model, to_model=to_model, reason=reason):
                        switch = event.as_dict()
                        self.emit("model.fallback", key=message_ids.fallback_key(env.step_id, self._switches),
                                  fields=ModelFallbackFields(from_model=from_model, to_model=to_model, reason=reason))
                        self._switches += 1
                        count_fallback(switch)
                    case Retracted(model=model, reason=reason):
                        self._discards += 1
                        self.emit("retracted", key=message_ids.retract_key(env.step_id, f"{self.attempt}.{self._discards}"),
                                  fields=RetractedFields(turn=env.turn,
                                  reason=f"{model} failed mid-answer ({reason}): the partial answer is void"))
                    case Finished():
                        outcome = event
        if outcome is None:
            raise RuntimeError("a model stream ended without a response")
        return outcome

    def emit(self, kind: str, fields: EventFields, key: str | None = None) -> None:
        """Queue one event of the step's run; raises what a send before it failed with (the
        stream stops there, as it did when each event was sent in the stream's way)."""
        if self._failed is not None:
            raise self._failed
        self._queue.append((self.env.run_id, kind, key, fields))
        self._unsent_kept = self._unsent_kept or kind not in EPHEMERAL_KINDS
        if self._sender is None:
            self._sender = asyncio.get_running_loop().create_task(self._send(), name="llm-step-events")

    @property
    def unsent_kept(self) -> bool:
        """Whether an event the transcript keeps is not out yet: the step's record waits for
        it (a record stands for the whole step, and its replay emits no event again)."""
        return self._unsent_kept

    async def sent(self) -> None:
        """Until every event queued so far is stored and published (its PubAck in); raises
        what a send failed with."""
        if self._sender is not None:
            await asyncio.shield(self._sender)
        if self._failed is not None:
            raise self._failed

    async def _send(self) -> None:
        env = self.env
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                await self.bus.emit_many(env.session_id, batch)
                self._unsent_kept = any(kind not in EPHEMERAL_KINDS for _, kind, _, _ in self._queue)
        except BaseException as exc:  # kept for sent() and the next emit(); nothing more is sent
            self._failed = exc
            self._queue.clear()
        finally:
            self._sender = None
