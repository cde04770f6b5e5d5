"""The provider interface of the llm service: one request, a stream of events, one ABC.

A call is `Model.stream(request)`: the typed events of model_events.py (text pieces as
they arrive, then the response), or `generate(request)` for the response alone. Every
backend (the Anthropic API, the scripted test model, the offline demo and bench models) is
a `Model`, and so is everything that adds behaviour to a model by wrapping it (wrapper.py):
the traces and latency metrics (instrumented_model.py), the fleet-wide circuit breaker
(breaker.py), the retries (retrying.py) and the fallback chain over several models
(fallback.py). The request and the response are model_call.py's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from .model_call import ModelRequest, ModelResponse
from .model_events import ModelStream, finished

if TYPE_CHECKING:
    from .errors import ModelCallError


class Model(ABC):
    """A backend that turns a `ModelRequest` into a stream of events ending in a `ModelResponse`.

    Implementations raise `ModelCallError` (errors.py) from the stream for every failure a
    caller may act on, with `retryable` telling whether the same call may succeed later.
    A caller that stops reading early closes the stream (`contextlib.aclosing`), which
    closes the provider's connection.
    """

    name: str = "model"

    @abstractmethod
    def stream(self, request: ModelRequest) -> ModelStream:
        """Run one call: its events (model_events.py) as they happen, the last a `Finished`."""

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Run one call for its response alone."""
        return (await finished(self.stream(request))).response

    def unavailable(self) -> ModelCallError | None:
        """Why this model must not be asked now, as the error its call would end with (an
        open circuit breaker, breaker.py), or None: the fallback chain skips such a model
        without calling it. By default a model is always available."""
        return None

    def gated(self) -> bool:
        """Whether the model limits admit each request first (limiter.py): its call then
        begins at the `Admitted` event, not at once."""
        return False

    async def aclose(self) -> None:  # noqa: B027 - optional hook, most models hold nothing
        """Release connections; the default holds none."""
