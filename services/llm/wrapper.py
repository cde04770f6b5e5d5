"""The base of a model that wraps another and adds one behaviour to it.

A `WrapperModel` is a `Model` that hands every call to `wrapped`; a subclass overrides
what it changes and nothing else. The llm service builds, per step and model id,
`RetryingModel(CircuitBreakerModel(InstrumentedModel(<the provider's model>)))` (retrying.py,
breaker.py, instrumented_model.py) and runs the fallback chain (fallback.py) over those
(step_chain.py), so each concern sits in one class and the provider models know none of them.

A wrapper holds nothing of its own: closing the wrapped model (its connections) is the
business of whoever made it (providers.ModelFactory), not of the wrappers built per step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .model import Model
from .model_call import ModelRequest

if TYPE_CHECKING:
    from .errors import ModelCallError
    from .model_events import ModelStream


class WrapperModel(Model):
    """`wrapped`, unchanged: the base of the wrappers."""

    def __init__(self, wrapped: Model) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name

    def stream(self, request: ModelRequest) -> ModelStream:
        return self.wrapped.stream(request)

    def unavailable(self) -> ModelCallError | None:
        return self.wrapped.unavailable()

    def gated(self) -> bool:
        return self.wrapped.gated()
