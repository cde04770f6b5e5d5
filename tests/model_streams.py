"""A model's event stream as a test reads it: every event (with its arrival time), and what
the events say: the text pieces, the response, the switches, the attempts, the retractions."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import TypeVar

from loopwire.llm.model import Model
from loopwire.llm.model_call import ModelRequest, ModelResponse
from loopwire.llm.model_events import Finished, ModelEvent, ModelStarted, Retracted, Retrying, TextDelta

E = TypeVar("E")


class Streamed:
    """Collects the events of the calls it runs (`run`), in order."""

    def __init__(self) -> None:
        self.events: list[ModelEvent] = []
        self.times: list[float] = []
        """When each text piece arrived (the event loop's clock)."""

    async def run(self, model: Model, request: ModelRequest) -> ModelResponse:
        """One call of `model`, read to its end; its response (a failure raises, the events
        before it kept)."""
        async with aclosing(model.stream(request)) as events:
            async for event in events:
                self.events.append(event)
                if isinstance(event, TextDelta):
                    self.times.append(asyncio.get_running_loop().time())
        return self.finished.response

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def pieces(self) -> list[str]:
        return [e.text for e in self.of(TextDelta)]

    @property
    def finished(self) -> Finished:
        return self.of(Finished)[-1]

    @property
    def fallbacks(self) -> list[dict[str, str]]:
        return self.finished.fallbacks

    @property
    def started(self) -> list[str]:
        return [e.model for e in self.of(ModelStarted)]

    @property
    def attempts(self) -> int:
        """Model calls made: one per model the chain started, one per retry."""
        return len(self.of(ModelStarted)) + len(self.of(Retrying))

    @property
    def retracted(self) -> list[tuple[str, str]]:
        return [(e.model, e.reason) for e in self.of(Retracted)]
