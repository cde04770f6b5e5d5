"""A scripted model for tests: canned responses in order, each request recorded.

`ScriptedModel(responses=[...])` plays canned responses (or failures) in order and fails
loudly on a call it has no response for (`ScriptExhausted`); `assert_done()` fails on
responses left unused. It is a real `Model` (pydantic-ai's TestModel / FunctionModel, in
spirit), so a test runs the very same service code as the Anthropic provider. An entry
may be a `ScriptedResponse`, a `ModelCallError` to raise, a dict, or a callable of the
request returning one of those.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock

from .errors import ModelCallError
from .model import Model
from .model_call import ModelRequest, ModelResponse
from .model_events import Finished, ModelStream
from .offline_reply import estimate_usage, reply_content, stream_text


class ScriptExhausted(AssertionError):
    """A scripted model was called more often than it has responses."""


@dataclass
class ScriptedResponse:
    """One canned answer (or failure)."""

    text: str | None = None
    tool_uses: list[ContentBlock] = field(default_factory=list)
    """`{"name", "input", "id"?}`; ids default to a deterministic `toolu_...`."""
    stop_reason: str | None = None
    """Defaults to `tool_use` when there are tool uses, else `end_turn`."""
    error: ModelCallError | None = None
    """Raised instead of answering (after `delay_s`)."""
    usage: Usage | None = None
    """Overrides the word-count usage."""
    delay_s: float = 0.0
    """Pause before each text chunk (a slow stream) and before an error."""

    @classmethod
    def parse(cls, spec: ScriptedResponse | ModelCallError | dict[str, Any]) -> ScriptedResponse:
        if isinstance(spec, ScriptedResponse):
            return spec
        if isinstance(spec, ModelCallError):
            return cls(error=spec)
        err = spec.get("error")
        error = None
        if isinstance(err, dict):
            error = ModelCallError(err.get("code", "server_error"), err.get("message", "scripted failure"),
                                   bool(err.get("retryable", False)), status=err.get("status"))
        elif isinstance(err, ModelCallError):
            error = err
        usage = spec.get("usage")
        return cls(text=spec.get("text"), tool_uses=list(spec.get("tool_use") or spec.get("tool_uses") or []),
                   stop_reason=spec.get("stop_reason"), error=error,
                   usage=Usage(**usage) if isinstance(usage, dict) else usage,
                   delay_s=float(spec.get("delay_s", 0.0)))


ScriptEntry = ScriptedResponse | ModelCallError | dict[str, Any] | Callable[[ModelRequest], Any]


class ScriptedModel(Model):
    """Plays `responses` in order, one per call; records every request. A test double in
    place of a real model: its replies name the model asked for unless `model_id` says
    otherwise (the offline models a user can run, DemoModel and BenchModel, name
    themselves)."""

    name = "scripted"

    def __init__(self, responses: list[ScriptEntry] | None = None, model_id: str | None = None) -> None:
        self.model_id = model_id
        self._script: list[ScriptEntry] = list(responses or [])
        self._next = 0
        self.requests: list[ModelRequest] = []

    @property
    def remaining(self) -> int:
        return len(self._script) - self._next

    def add(self, *responses: ScriptEntry) -> None:
        self._script.extend(responses)

    def assert_done(self) -> None:
        if self.remaining:
            raise AssertionError(f"{self.remaining} scripted response(s) were never requested")

    async def stream(self, request: ModelRequest) -> ModelStream:
        self.requests.append(request)
        if self._next >= len(self._script):
            raise ScriptExhausted(
                f"unexpected model call #{len(self.requests)} ({request.model}); the script has "
                f"{len(self._script)} response(s). Last message: {str(request.messages[-1])[:300]}")
        entry = self._script[self._next]
        self._next += 1
        spec = entry(request) if callable(entry) else entry
        resp = ScriptedResponse.parse(spec)
        if resp.error is not None:
            if resp.delay_s:
                await asyncio.sleep(resp.delay_s)
            resp.error.model = resp.error.model or request.model
            raise resp.error
        if resp.text:
            async for delta in stream_text(resp.text, resp.delay_s):
                yield delta
        content = reply_content(request, resp.text, resp.tool_uses)
        stop = resp.stop_reason or ("tool_use" if resp.tool_uses else "end_turn")
        yield Finished(ModelResponse(message={"role": "assistant", "content": content}, stop_reason=stop,
                                     model=self.model_id or request.model,
                                     usage=resp.usage or estimate_usage(request, content),
                                     response_id=f"msg_scripted_{len(self.requests)}"))
