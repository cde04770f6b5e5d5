"""What a client sees of one generation: the model events (model_events.py) of a step's
chain as session events on the bus.

    TextDelta      -> `text.delta` {turn, text}
    ModelStarted   -> `generating` {turn, model}
    ModelSwitched  -> `model.fallback` {from_model, to_model, reason}, keyed per switch, and
                      the fallback counter (step_metrics.py)
    Retracted      -> `retracted` {turn, reason}, keyed per attempt and discard
    Retrying       -> nothing (the backoff is the chain's business)
"""

from __future__ import annotations

from contextlib import aclosing

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import Generate
from loopwire.shared.runtime.bus import Bus

from .model_events import Finished, ModelStarted, ModelStream, ModelSwitched, Retracted, TextDelta
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

    async def follow(self, events: ModelStream) -> Finished:
        """Emit the events of `events` as they come; the `Finished` that ends it."""
        env, bus = self.env, self.bus
        sid, run_id = env.session_id, env.run_id
        outcome: Finished | None = None
        async with aclosing(events):
            async for event in events:
                match event:
                    case TextDelta(text=text):
                        self.streamed = True
                        await bus.emit(sid, run_id, "text.delta", turn=env.turn, text=text)
                    case ModelStarted(model=model):
                        await bus.emit(sid, run_id, "generating", turn=env.turn, model=model)
                    case ModelSwitched():
                        switch = event.as_dict()
                        await bus.emit(sid, run_id, "model.fallback", key=keys.fallback_key(env.step_id, self._switches),
                                       **switch)
                        self._switches += 1
                        count_fallback(switch)
                    case Retracted(model=model, reason=reason):
                        self._discards += 1
                        await bus.emit(sid, run_id, "retracted",
                                       key=keys.retract_key(env.step_id, f"{self.attempt}.{self._discards}"),
                                       turn=env.turn,
                                       reason=f"{model} failed mid-answer ({reason}): the partial answer is void")
                    case Finished():
                        outcome = event
        if outcome is None:
            raise RuntimeError("a model stream ended without a response")
        return outcome
