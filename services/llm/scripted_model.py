"""Deterministic models: a scripted one for tests and an offline demo brain.

Both are real `Model`s, so tests and the offline demo run the very same service code as
the Anthropic provider (pydantic-ai's TestModel / FunctionModel, in spirit).

- `ScriptedModel(responses=[...])` plays canned responses in order and fails loudly on
  a call it has no response for (`ScriptExhausted`); `assert_done()` fails on responses
  left unused.
- `DemoModel` answers without any API: it calls a `calculator` tool for an arithmetic
  question, reads tool results back, and otherwise quotes the prompt.
- `BenchModel` is the brain of `make bench`: it calls a `noop` tool N times, then says
  "done". `DemoModel` hands a request to it when `noop` is offered and the first user
  message says `bench:N`, so `LOOPWIRE_LLM_PROVIDER=scripted` selects it.

Text is streamed through `on_text` in a few chunks, and usage is a rough word count, so
streaming and token budgets behave as with a real model.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from loopwire.shared.contract.envelopes import Usage

from .errors import ModelCallError
from .model import Model, ModelRequest, ModelResponse, TextCallback


class ScriptExhausted(AssertionError):
    """A scripted model was called more often than it has responses."""


@dataclass
class ScriptedResponse:
    """One canned answer (or failure)."""

    text: str | None = None
    tool_uses: list[dict[str, Any]] = field(default_factory=list)
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
                                   bool(err.get("retryable", False)), err.get("status"))
        elif isinstance(err, ModelCallError):
            error = err
        usage = spec.get("usage")
        return cls(text=spec.get("text"), tool_uses=list(spec.get("tool_use") or spec.get("tool_uses") or []),
                   stop_reason=spec.get("stop_reason"), error=error,
                   usage=Usage(**usage) if isinstance(usage, dict) else usage,
                   delay_s=float(spec.get("delay_s", 0.0)))


ScriptEntry = ScriptedResponse | ModelCallError | dict[str, Any] | Callable[[ModelRequest], Any]


# -- helpers shared by both models -------------------------------------------------------
def split_chunks(text: str, parts: int = 4) -> list[str]:
    """`text` cut at word boundaries into at most `parts` pieces that join back to it."""
    words = re.findall(r"\S+\s*|\s+", text)
    if len(words) <= 1:
        return [text] if text else []
    size = max(1, -(-len(words) // parts))
    return ["".join(words[i:i + size]) for i in range(0, len(words), size)]


_STRUCTURAL_KEYS = frozenset({"type", "role", "id", "tool_use_id", "is_error"})


def _words(value: Any) -> int:
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, dict):  # the words of the values, not of the structure
        return sum(_words(v) for k, v in value.items() if k not in _STRUCTURAL_KEYS)
    if isinstance(value, list):
        return sum(_words(v) for v in value)
    return 1 if value is not None else 0


def estimate_usage(request: ModelRequest, content: list[dict[str, Any]]) -> Usage:
    """Rough tokens: one per word of the prompt (system, messages, tools) and of the answer."""
    prompt = _words(request.system or "") + _words(request.messages)
    prompt += sum(_words(t.name) + _words(t.description) for t in request.tools)
    return Usage(input_tokens=max(1, prompt), output_tokens=max(1, _words(content)))


def _stable_id(request: ModelRequest, salt: str) -> str:
    """A tool_use id that is the same for the same request (replicas, redeliveries)."""
    digest = hashlib.sha1(orjson.dumps(request.messages, option=orjson.OPT_SORT_KEYS) + salt.encode())
    return f"toolu_{digest.hexdigest()[:20]}"


async def _stream_text(text: str, on_text: TextCallback | None, delay_s: float = 0.0) -> None:
    for piece in split_chunks(text):
        if delay_s:
            await asyncio.sleep(delay_s)
        if on_text is not None:
            await on_text(piece)


def _content(request: ModelRequest, text: str | None, tool_uses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    for i, tu in enumerate(tool_uses):
        content.append({"type": "tool_use", "id": tu.get("id") or _stable_id(request, f"{i}:{tu['name']}"),
                        "name": tu["name"], "input": dict(tu.get("input") or {})})
    return content


# -- the scripted model --------------------------------------------------------------------
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

    async def generate(self, request: ModelRequest, on_text: TextCallback | None = None) -> ModelResponse:
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
            await _stream_text(resp.text, on_text, resp.delay_s)
        content = _content(request, resp.text, resp.tool_uses)
        stop = resp.stop_reason or ("tool_use" if resp.tool_uses else "end_turn")
        return ModelResponse(message={"role": "assistant", "content": content}, stop_reason=stop,
                             model=self.model_id or request.model,
                             usage=resp.usage or estimate_usage(request, content),
                             response_id=f"msg_scripted_{len(self.requests)}")


# -- the offline demo brain ----------------------------------------------------------------
_EXPR_RUN = re.compile(r"[0-9.+\-*/()^%\s]+")
_HAS_OPERATION = re.compile(r"\d\s*[-+*/^%]\s*[\d(]")


def find_expression(text: str) -> str | None:
    """The first arithmetic expression in `text` (`What is 15 * 26 + 5?` -> `15 * 26 + 5`)."""
    text = text.replace("×", "*").replace("÷", "/")
    for match in _EXPR_RUN.finditer(text):
        candidate = match.group().strip().rstrip(".").strip()
        if _HAS_OPERATION.search(candidate):
            return candidate
    return None


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


class DemoModel(Model):
    """Deterministic answers without an API, good enough to show the loop working. Its
    replies name it (`loopwire-demo`): it is not the model asked for and has no price."""

    name = "demo"
    model_id = "loopwire-demo"

    async def generate(self, request: ModelRequest, on_text: TextCallback | None = None) -> ModelResponse:
        if bench_target(request) is not None:  # `make bench`: see BenchModel below
            return await _BENCH.generate(request, on_text)
        last = request.messages[-1] if request.messages else {"role": "user", "content": ""}
        content = last.get("content", "")
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] \
            if isinstance(content, list) else []
        tool_uses: list[dict[str, Any]] = []
        text: str | None
        if results:
            text = self._answer_results(results)
        else:
            prompt = _text_of(content).strip()
            expression = find_expression(prompt) if "calculator" in request.tool_names() else None
            if expression is not None:
                text = f"Let me calculate {expression}."
                tool_uses = [{"name": "calculator", "input": {"expression": expression}}]
            else:
                quoted = prompt if len(prompt) <= 200 else prompt[:197] + "..."
                text = (f'You said: "{quoted}". I am loopwire\'s offline demo model; '
                        "set ANTHROPIC_API_KEY to talk to Claude.")
        await _stream_text(text, on_text)
        blocks = _content(request, text, tool_uses)
        return ModelResponse(message={"role": "assistant", "content": blocks},
                             stop_reason="tool_use" if tool_uses else "end_turn", model=self.model_id,
                             usage=estimate_usage(request, blocks),
                             response_id=_stable_id(request, "msg").replace("toolu_", "msg_demo_"))

    @staticmethod
    def _answer_results(results: list[dict[str, Any]]) -> str:
        parts = []
        for block in results:
            value = _text_of(block.get("content", "")).strip().rstrip(".")
            if block.get("is_error"):
                parts.append(f"the tool reported an error: {value}")
            else:
                parts.append(value)
        if len(parts) == 1:
            if results[0].get("is_error"):
                return f"Sorry, {parts[0]}."
            return f"The result is {parts[0]}."
        return "The results are: " + "; ".join(parts) + "."


# -- the bench brain -----------------------------------------------------------------------
BENCH_TOOL = "noop"
_BENCH_PROMPT = re.compile(r"\bbench:(\d+)\b")


def bench_target(request: ModelRequest) -> int | None:
    """N when `request` is a bench run: the `noop` tool is offered and the first user
    message says `bench:N`; None otherwise."""
    if BENCH_TOOL not in request.tool_names():
        return None
    first = next((m for m in request.messages if m.get("role") == "user"), None)
    if first is None:
        return None
    match = _BENCH_PROMPT.search(_text_of(first.get("content", "")))
    return int(match.group(1)) if match else None


def count_tool_results(messages: list[dict[str, Any]]) -> int:
    """tool_result blocks in the conversation (one per finished tool call)."""
    count = 0
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            count += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
    return count


class BenchModel(Model):
    """`make bench`'s model: calls `noop` until the conversation holds N tool results (N
    from `bench:N` in the first user message), then answers "done". Each call's input is
    `{"n": <call number>}`, 1 to N: the same input in consecutive turns is what the
    router's loop detection (rightly) stops.

    No delay and as little work as possible, so a benchmark measures loopwire and not
    the model: the tool_use id hashes only the last message and the conversation's length
    (deterministic, and distinct across the turns of a run and the runs of a session),
    and usage is a constant per call instead of a word count of the whole history."""

    name = "bench"
    model_id = "loopwire-bench"

    async def generate(self, request: ModelRequest, on_text: TextCallback | None = None) -> ModelResponse:
        target = bench_target(request) or 0
        done = count_tool_results(request.messages)
        last = request.messages[-1] if request.messages else {}
        if done < target:
            digest = hashlib.sha1(orjson.dumps(last, option=orjson.OPT_SORT_KEYS)
                                  + f":{len(request.messages)}:{done}".encode())
            blocks: list[dict[str, Any]] = [{"type": "tool_use", "id": f"toolu_{digest.hexdigest()[:20]}",
                                             "name": BENCH_TOOL, "input": {"n": done + 1}}]
            stop = "tool_use"
        else:
            await _stream_text("done", on_text)
            blocks = [{"type": "text", "text": "done"}]
            stop = "end_turn"
        return ModelResponse(message={"role": "assistant", "content": blocks}, stop_reason=stop,
                             model=self.model_id, usage=Usage(input_tokens=10, output_tokens=5),
                             response_id=f"msg_bench_{done}")


_BENCH = BenchModel()
