"""A model call as the outside sees it: a trace span and latency metrics per call.

`InstrumentedModel` wraps any `Model` for one step: each call (each retry and each
fallback model) gets its own `chat {model}` span (GenAI semantic conventions, child of
the run's trace carried in the envelope) and feeds the time-to-first-token and
request-duration histograms. The step-level counters are step_metrics.py's.

Token usage and cost are counted by the router, which owns the run's accounting (and the
prices); counting them here too would double them.
"""

from __future__ import annotations

import time
from contextlib import aclosing
from typing import TYPE_CHECKING

from loopwire.shared.contract.envelopes import Generate
from loopwire.shared.observability import metrics, tracing

from .model import Model
from .model_call import ModelRequest
from .model_events import Finished, ModelStream, TextDelta
from .wrapper import WrapperModel

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class InstrumentedModel(WrapperModel):
    """`wrapped`, with a span and latency metrics around every call."""

    def __init__(self, wrapped: Model, env: Generate) -> None:
        super().__init__(wrapped)
        self._env = env

    async def stream(self, request: ModelRequest) -> ModelStream:
        label = metrics.model_label(request.model)
        started = time.monotonic()
        first_chunk_s: float | None = None
        timed = False

        def time_call() -> None:
            nonlocal timed
            if not timed:
                timed = True
                metrics.child(metrics.LLM_REQUEST_DURATION, model=label).observe(time.monotonic() - started)

        with tracing.chat_span(request.model, conversation_id=self._env.session_id,
                                 max_tokens=request.max_tokens, temperature=request.temperature,
                                 system=request.system, messages=request.messages,
                                 parent=self._env.trace) as span:
            try:
                async with aclosing(self.wrapped.stream(request)) as events:
                    async for event in events:
                        if isinstance(event, TextDelta) and first_chunk_s is None:
                            first_chunk_s = time.monotonic() - started
                            metrics.child(metrics.LLM_TTFT, model=label).observe(first_chunk_s)
                        elif isinstance(event, Finished):
                            time_call()
                            self._record(span, event, first_chunk_s)
                        yield event
            finally:
                time_call()

    @staticmethod
    def _record(span: Span, event: Finished, first_chunk_s: float | None) -> None:
        response = event.response
        usage = response.usage
        tracing.record_chat_response(
            span, response_model=response.model, response_id=response.response_id,
            finish_reasons=[response.stop_reason], input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens, cache_read_input_tokens=usage.cache_read_input_tokens,
            cache_creation_input_tokens=usage.cache_creation_input_tokens,
            time_to_first_chunk_s=first_chunk_s, output_messages=[response.message])
