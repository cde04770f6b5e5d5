"""A fake Anthropic Messages API: a real local HTTP server for tests and demos
(`loopwire.testing.fake_anthropic`, in the `testing` extra, for a user's own suite too).

It speaks enough of the API for the official SDK to be used unchanged against it
(point ANTHROPIC_BASE_URL at `server.url`):

- `POST /v1/messages`: a JSON `Message`, or with `"stream": true` the exact SSE event
  sequence (message_start with input usage, ping, content_block_start / delta
  (`text_delta`, `input_json_delta` cut into several `partial_json` pieces) / stop,
  message_delta with stop_reason and cumulative usage, message_stop);
- `POST /v1/messages/count_tokens`: `{"input_tokens": ceil(chars / 4)}` of the JSON of
  system + messages + tools (deterministic);
- a prompt cache (fake_prompt_cache.py): a request with `cache_control` breakpoints is
  answered with the `cache_read_input_tokens` and `cache_creation_input_tokens` the real
  cache would give;
- the real API's checks of a history (message_rules.py): a `tool_use` without its
  `tool_result` in the next message, a `tool_result` without its `tool_use`, empty
  content are refused with its 400 and kept in `refused`;
- a provider's own limits and latency (fake_provider_limits.py): `enforce(rpm=..,
  max_in_flight=..)` answers 429 with `retry-after` past them, `latency(first_token_s=..,
  total_s=..)` paces every answer;
- error injection (`fail_next(529, n=2)`), scripted answers per model
  (`script("claude-x", [...])`, `"*"` for any model), an optional responder function,
  and an echo answer when nothing else applies;
- every request recorded in `requests`.

A response spec is a dict::

    {"text": "Hello", "chunks": ["He", "llo"],            # text, optionally pre-cut
     "tool_use": [{"name": "calculator", "input": {...}, "id": "toolu_1"?}],
     "content": [raw blocks],                             # instead of text/tool_use
     "stop_reason": "end_turn",                           # default: tool_use if tools
     "usage": {"input_tokens": 10, "output_tokens": 5},   # default: counted
     "delay_s": 0.0, "chunk_delay_s": 0.0,                # slow start / slow stream
     "error": {"status": 529, "type": "overloaded_error", "message": "Overloaded"},
     "error_after": 2}                                    # with stream: fail mid-stream

In-process::

    with FakeAnthropic() as server:
        server.script("*", [{"text": "hi"}])
        ... AsyncAnthropic(base_url=server.url, api_key="x") ...
        assert len(server.message_requests) == 1

As a process (other suites run it in a subprocess)::

    python -m loopwire.testing.fake_anthropic --port 0 --script script.json
    # prints FAKE_ANTHROPIC_URL=http://127.0.0.1:PORT once it listens
    python -m loopwire.testing.fake_anthropic --responder my_suite.model:respond

The script file is a list of response specs (for any model) or
`{"scripts": {"<model or *>": [specs]}, "failures": [{"status": 529, "n": 2}]}`.
A running process is steered over HTTP too: `POST /_fake/script` `{"model", "responses"}`,
`POST /_fake/fail_next` `{"status", "n", "model"}`, `POST /_fake/enforce` `{"model", "rpm",
"max_in_flight", "window_s", "retry_after"}`, `POST /_fake/latency` `{"model",
"first_token_s", "total_s", "chunks"}`, `POST /_fake/reset`,
`GET /_fake/requests`, `GET /_fake/stats` (`max_in_flight`, `in_flight`, `usages`, `with_tools`, the `arrivals` of message
requests and the times of the ones `enforce()` refused, monotonic seconds).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import re
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

from loopwire.shared.contract.messages import ContentBlock, MessagesRequest

from .fake_anthropic_http import MessagesApiHandler
from .fake_prompt_cache import PromptCache
from .fake_provider_limits import ProviderLimits
from .fake_server import Failure as BaseFailure
from .fake_server import RecordedRequest, ResponseSpec, ScriptedServer

Responder = Callable[[MessagesRequest], ResponseSpec | None]

ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
    429: "rate_limit_error", 500: "api_error", 504: "timeout_error", 529: "overloaded_error",
}
ERROR_MESSAGES = {
    400: "Invalid request", 401: "invalid x-api-key", 403: "Forbidden", 404: "Not found",
    429: "Number of request tokens has exceeded your per-minute rate limit",
    500: "Internal server error", 529: "Overloaded",
}


def count_tokens(body: MessagesRequest) -> int:
    """Deterministic token count: a quarter of the characters of system+messages+tools."""
    payload = {"system": body.get("system"), "messages": body.get("messages", []), "tools": body.get("tools", [])}
    return max(1, math.ceil(len(json.dumps(payload, separators=(",", ":"), sort_keys=True)) / 4))


def words_chunks(text: str, words_per_chunk: int = 3) -> list[str]:
    """`text` in pieces of a few words that join back to exactly `text`."""
    words = re.findall(r"\S+\s*|\s+", text)
    pieces = ["".join(words[i:i + words_per_chunk]) for i in range(0, len(words), words_per_chunk)]
    return pieces or ([text] if text else [])


def json_chunks(data: str, parts: int = 3) -> list[str]:
    size = max(1, math.ceil(len(data) / parts))
    return [data[i:i + size] for i in range(0, len(data), size)]


def _last_user_text(body: MessagesRequest) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text", "") for b in content or [] if b.get("type") == "text"]
        results = [b for b in content or [] if b.get("type") == "tool_result"]
        if results and not texts:
            return "tool results: " + "; ".join(str(r.get("content")) for r in results)
        return " ".join(texts)
    return ""


class ApiMessage(TypedDict):
    """The Messages API's answer to one request, as it sends it (a `Message` object)."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str | None
    content: list[ContentBlock]
    stop_reason: str
    stop_sequence: None
    usage: dict[str, int]


@dataclass
class Failure(BaseFailure):
    error_type: str | None = None
    retry_after: float | None = None
    mid_stream: bool = False
    """For a streamed request: answer 200, start the message, then send an error event."""


class FakeAnthropic(ScriptedServer[Failure]):
    """The fake server; `start()` serves on a free port in a background thread."""

    handler = MessagesApiHandler
    thread_name = "fake-anthropic"

    count_tokens = staticmethod(count_tokens)
    """What `POST /v1/messages/count_tokens` answers."""

    responder: Responder | None = None

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self._msg_counter = 0
        self.usages: list[dict[str, int]] = []
        """The usage answered to each message request, in the order they were answered."""
        self.prompt_cache = PromptCache()
        """The prompt cache it simulates (fake_prompt_cache.py); `reset()` empties it."""
        self.provider_limits = ProviderLimits()
        """The provider's own rate limits and latencies (fake_provider_limits.py): `enforce()`,
        `latency()`; `reset()` clears them."""
        self.in_flight = 0
        """Message requests being answered now (a slow model's are in flight for its delay)."""
        self.max_in_flight = 0
        """The most message requests answered at once since the last `reset()`."""
        self.served_s: list[float] = []
        """How long each message request took to answer, from its body read to its last byte
        (a latency model's pace, and whatever the fake's own load added to it)."""
        self.refused: list[tuple[str, MessagesRequest]] = []
        """(the API's error message, the request body) of each message request refused as
        the real API refuses it (a malformed history: message_rules.py). `reset()` leaves
        it: a suite checks it after each test (`take_refused`)."""

    def entered(self) -> None:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def left(self, served_s: float | None = None) -> None:
        with self.lock:
            self.in_flight -= 1
            if served_s is not None:
                self.served_s.append(served_s)

    def reset(self) -> None:
        super().reset()
        with self.lock:
            self.max_in_flight = self.in_flight
            self.served_s.clear()
            self.prompt_cache.clear()
            self.usages.clear()
        self.provider_limits.clear()

    def refuse(self, problem: str, body: MessagesRequest) -> None:
        with self.lock:
            self.refused.append((problem, body))

    def take_refused(self) -> list[tuple[str, MessagesRequest]]:
        """The refused requests so far, and forget them."""
        with self.lock:
            refused, self.refused = self.refused, []
        return refused

    # -- steering ---------------------------------------------------------------------------
    def fail_next(self, status: int = 529, n: int | None = 1, model: str | None = None,
                  *, message: str | None = None, error_type: str | None = None,
                  retry_after: float | None = None, mid_stream: bool = False) -> None:
        """Fail the next `n` message requests (for `model`, or any); `n=None`: all of them."""
        self._inject(Failure(status, n, model, message, error_type, retry_after, mid_stream))

    def enforce(self, model: str = "*", *, rpm: int | None = None, max_in_flight: int | None = None,
                window_s: float = 60.0, retry_after: float = 1.0) -> None:
        """Answer 429 with `retry-after` past `rpm` requests in `window_s` or `max_in_flight`
        at once, as a provider's own limits do (fake_provider_limits.py)."""
        self.provider_limits.enforce(model, rpm=rpm, max_in_flight=max_in_flight, window_s=window_s,
                                     retry_after=retry_after)

    def latency(self, model: str = "*", *, first_token_s: float = 1.0, total_s: float = 5.0, chunks: int = 4) -> None:
        """Answer after `first_token_s`, the rest in `chunks` pieces until `total_s`."""
        self.provider_limits.latency(model, first_token_s=first_token_s, total_s=total_s, chunks=chunks)

    @property
    def rate_limited(self) -> list[tuple[str, float]]:
        """(model, monotonic time) of each request `enforce()` answered 429."""
        return list(self.provider_limits.rate_limited)

    @property
    def message_requests(self) -> list[dict[str, Any]]:
        """Bodies of the `POST /v1/messages` requests so far."""
        with self.lock:
            return [r.body for r in self.requests if r.path == "/v1/messages"]

    def wait_for_requests(self, n: int, timeout: float = 10.0, path: str = "/v1/messages") -> list[RecordedRequest]:
        """Block until `n` requests to `path` arrived (for threads; use asyncio.to_thread)."""
        return self._wait_for((path,), n, timeout)

    # -- answering (called from handler threads) -----------------------------------------
    def take_response(self, body: MessagesRequest) -> ResponseSpec:
        scripted = self._scripted(str(body.get("model", "")))
        if scripted is not None:
            return scripted
        responder = self.responder
        if responder is not None:
            spec = responder(body)
            if spec is not None:
                return spec
        return {"text": f"Echo: {_last_user_text(body)}"}

    def _next_ids(self) -> tuple[str, int]:
        with self.lock:
            self._msg_counter += 1
            return f"msg_fake_{self._msg_counter:06d}", self._msg_counter

    def build_message(self, body: MessagesRequest, spec: ResponseSpec) -> ApiMessage:
        """The complete `Message` for a response spec."""
        msg_id, n = self._next_ids()
        content: list[ContentBlock]
        if spec.get("content") is not None:
            content = [b.copy() for b in spec["content"]]  # the test's blocks, as it wrote them
        else:
            content = []
            text = spec.get("text")
            if text is None and spec.get("chunks"):
                text = "".join(spec["chunks"])
            if text:
                content.append({"type": "text", "text": text})
            for i, tu in enumerate(spec.get("tool_use") or []):
                content.append({"type": "tool_use", "id": tu.get("id") or f"toolu_fake_{n:06d}_{i}",
                                "name": tu["name"], "input": tu.get("input", {})})
        has_tools = any(b.get("type") == "tool_use" for b in content)
        out_chars = sum(len(b.get("text", "")) + len(json.dumps(b.get("input", ""))) for b in content)
        usage = {"input_tokens": count_tokens(body), "output_tokens": max(1, math.ceil(out_chars / 4)),
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        with self.lock:
            cached = self.prompt_cache.usage(str(body.get("model", "")), body, total=usage["input_tokens"])
            if not spec.get("usage"):  # a scripted usage is the test's word, as it is
                usage.update(cached or {})
            usage.update(spec.get("usage") or {})
            self.usages.append(dict(usage))
        return {"id": msg_id, "type": "message", "role": "assistant", "model": spec.get("model") or body.get("model"),
                "content": content, "stop_reason": spec.get("stop_reason") or ("tool_use" if has_tools else "end_turn"),
                "stop_sequence": None, "usage": usage}

    def stream_events(self, message: ApiMessage, spec: ResponseSpec) -> Iterator[tuple[str, dict[str, Any]]]:
        """The SSE events of a streamed `message`, in the API's order."""
        usage = message["usage"]
        start = dict(message, content=[], stop_reason=None,
                     usage={**usage, "output_tokens": min(1, usage["output_tokens"])})
        yield "message_start", {"type": "message_start", "message": start}
        yield "ping", {"type": "ping"}
        deltas = 0
        error_after = int(spec["error_after"]) if spec.get("error_after") is not None else None
        for index, block in enumerate(message["content"]):
            if block["type"] == "text":
                yield "content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": {"type": "text", "text": ""}}
                chunks = spec.get("chunks") if spec.get("content") is None else None
                pieces: list[str] = list(chunks) if chunks else words_chunks(block["text"])
                if error_after == 0:
                    yield "error", self.error_body(spec["error"].get("status", 529), spec["error"])
                    return
                for piece in pieces:
                    deltas += 1
                    yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "text_delta", "text": piece}}
                    if error_after is not None and deltas >= error_after:
                        # the API reports an overload inside a started stream this way
                        yield "error", self.error_body(spec["error"].get("status", 529), spec["error"])
                        return
            elif block["type"] == "tool_use":
                yield "content_block_start", {"type": "content_block_start", "index": index,
                                              "content_block": {"type": "tool_use", "id": block["id"],
                                                                "name": block["name"], "input": {}}}
                for piece in ["", *json_chunks(json.dumps(block["input"]))]:
                    yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                                  "delta": {"type": "input_json_delta", "partial_json": piece}}
            else:
                yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": block}
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        if error_after is not None:  # no text to break off in: fail before the end
            yield "error", self.error_body(spec["error"].get("status", 529), spec["error"])
            return
        # message_delta usage is cumulative (totals, not increments).
        yield "message_delta", {"type": "message_delta",
                                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                                "usage": {"input_tokens": usage["input_tokens"],
                                          "output_tokens": usage["output_tokens"]}}
        yield "message_stop", {"type": "message_stop"}

    @staticmethod
    def error_body(status: int, error: dict[str, Any] | None = None) -> dict[str, Any]:
        error = error or {}
        return {"type": "error", "error": {
            "type": error.get("type") or ERROR_TYPES.get(status, "api_error"),
            "message": error.get("message") or ERROR_MESSAGES.get(status, f"error {status}")}}


# -- pytest and command line ---------------------------------------------------------------
try:
    import pytest

    @pytest.fixture
    def anthropic_server() -> Iterator[FakeAnthropic]:
        """A started fake; import this name into a test module to use it as a fixture."""
        with FakeAnthropic() as server:
            yield server
except ImportError:  # pragma: no cover - the standalone process needs no pytest
    pass


def load_script(server: FakeAnthropic, path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, list):
        server.script("*", data)
        return
    for model, responses in (data.get("scripts") or {}).items():
        server.script(model, responses)
    for f in data.get("failures") or []:
        server.fail_next(int(f.get("status", 529)), f.get("n", 1), f.get("model"), message=f.get("message"),
                         error_type=f.get("type"), retry_after=f.get("retry_after"), mid_stream=bool(f.get("mid_stream", False)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake Anthropic Messages API for loopwire tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", help="JSON file of scripted responses")
    parser.add_argument("--responder", help="`module:function`, the responder of every unscripted request "
                                            "(a function of the request body returning a response spec)")
    args = parser.parse_args(argv)
    server = FakeAnthropic(args.host, args.port)
    if args.script:
        load_script(server, args.script)
    if args.responder:
        module, _, name = args.responder.partition(":")
        server.responder = server.standing_responder = getattr(importlib.import_module(module), name)
    server.start()
    print(f"FAKE_ANTHROPIC_URL={server.url}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
