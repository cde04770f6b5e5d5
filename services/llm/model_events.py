"""What a model call tells its caller while it runs: a stream of small typed events.

Every `Model` (model.py) answers a request with `stream(request)`, an async generator of
these events, as pydantic-ai's models do::

    TextDelta*  Finished                       a provider: text pieces, then the response
    ModelStarted, Retrying, Retracted,         added by the wrappers that ask again
    ModelSwitched                              (retrying.py) or ask another model (fallback.py)
    Throttled*  Admitted                       added by the model limits (limiter.py)

The stream ends with exactly one `Finished`, or raises the `ModelCallError` that ended it.
A stream that fails after some text yields `Retracted` first (`retracting`): those text
pieces are void, and whoever showed them (the llm service's `text.delta` events) says so.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import ModelCallError

if TYPE_CHECKING:
    from .model_call import ModelResponse


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the assistant's text, in order, as it arrives."""

    text: str


@dataclass(frozen=True, slots=True)
class ModelStarted:
    """The fallback chain starts asking `model` (once per model, not again for its retries).
    `gated`: the model limits admit its request first (an `Admitted` follows)."""

    model: str
    gated: bool = False


@dataclass(frozen=True, slots=True)
class Retrying:
    """`model` failed with `reason`; retry number `retry` (1-based) follows after `delay_s`."""

    model: str
    retry: int
    delay_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class Retracted:
    """The text `model` streamed since its attempt began is void: the attempt failed (`reason`)."""

    model: str
    reason: str


@dataclass(frozen=True, slots=True)
class ModelSwitched:
    """The fallback chain moves from `from_model` to `to_model` because of `reason`."""

    from_model: str
    to_model: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        """The switch as the `model.fallback` event and `GenerationResult.fallbacks` carry it."""
        return {"from_model": self.from_model, "to_model": self.to_model, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class Throttled:
    """`model`'s request waits for the model limits (limiter.py): `reason`, and the expected
    wait in seconds (0: until a request in flight ends)."""

    model: str
    reason: str
    wait_s: float


@dataclass(frozen=True, slots=True)
class Admitted:
    """The model limits let `model`'s request go: the call begins now."""

    model: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The call's response (its message, stop reason, model and usage), and the model
    switches made on the way to it (`ModelSwitched.as_dict`, set by the fallback chain)."""

    response: ModelResponse
    fallbacks: list[dict[str, str]] = field(default_factory=list)


ModelEvent = TextDelta | ModelStarted | Retrying | Retracted | ModelSwitched | Throttled | Admitted | Finished
ModelStream = AsyncGenerator[ModelEvent, None]


def failure_reason(err: ModelCallError) -> str:
    return f"{err.code}: {err.message}"


async def retracting(events: ModelStream, model: str) -> ModelStream:
    """`events` (one attempt of `model`), with a `Retracted` before the error that ends it
    when text streamed since the last retraction: a wrapper that catches the error and asks
    again (retrying.py, fallback.py) passes the stream through this, so the caller hears of
    void text once, from the innermost of them."""
    unretracted = False
    try:
        async with aclosing(events):
            async for event in events:
                if isinstance(event, TextDelta):
                    unretracted = True
                elif isinstance(event, Retracted):
                    unretracted = False
                yield event
    except ModelCallError as err:
        if unretracted:
            yield Retracted(model, failure_reason(err))
        raise


async def finished(events: ModelStream) -> Finished:
    """The `Finished` that ends `events`, the rest of them unheard."""
    last: Finished | None = None
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Finished):
                last = event
    if last is None:
        raise RuntimeError("a model stream ended without a response")
    return last
