"""A fake OpenAI API: a real local HTTP server for tests of the coding agents that speak
OpenAI's wire formats (`loopwire.testing.fake_openai`; also `python -m tests.fakes.openai_server`).

It answers the two APIs the agents of the `codex` and `opencode` profiles use:

- `POST /v1/responses` (the Responses API; codex, and opencode's `@ai-sdk/openai` providers):
  a JSON `response`, or with `"stream": true` the SSE events in the API's order
  (`response.created`, `response.in_progress`, `response.output_item.added`,
  `response.content_part.added`, `response.output_text.delta` ..., `.done` events,
  `response.function_call_arguments.delta`/`.done` for each function call,
  `response.completed` with `usage`);
- `POST /v1/chat/completions` (opencode's `@ai-sdk/openai-compatible` providers): a JSON
  `chat.completion`, or streamed `chat.completion.chunk`s (`delta.content`,
  `delta.tool_calls` with the arguments cut into pieces, `finish_reason`, a last chunk with
  `usage` when `stream_options.include_usage`), then `data: [DONE]`;
- `GET /v1/models`: the scripted model names.

A response spec is a dict, the same for both APIs::

    {"text": "Hello", "chunks": ["He", "llo"],                  # text, optionally pre-cut
     "tool_calls": [{"name": "add", "arguments": {"a": 1}, "id": "call_1"?}],
     "usage": {"input_tokens": 10, "output_tokens": 5},         # default: counted
     "delay_s": 0.0, "chunk_delay_s": 0.0,
     "error": {"status": 500, "message": "boom", "type": "server_error", "code": None}}

(`"tool_use": [{"name", "input"}]`, the Anthropic fake's spelling, is read as `tool_calls`.)
Answers come from scripts per model (`script("gpt-x", [...])`, `"*"` for any model), else a
`responder(body, api)` function, else an echo of the last user text. Every request is
recorded (`requests`, `responses_requests`, `chat_requests`); `tool_outputs(body)` reads
the function results a request carries back, in either API.

Pointing the agents at it (checked with codex 0.171 and opencode 1.18.33 from
deploy/agents):

- codex: the built-in `openai` provider (what `OPENAI_BASE_URL` changes) first opens the
  Responses API over a WebSocket. A provider of one's own, given with `-c` flags (no
  config file needed), streams over plain HTTP (SSE) instead: its first request is
  `POST {base_url}/responses`::

      codex exec --json --skip-git-repo-check -m MODEL \\
        -c model_provider=fake \\
        -c 'model_providers.fake={name="fake", base_url="http://127.0.0.1:PORT/v1",
                                   env_key="FAKE_OPENAI_KEY", wire_api="responses"}'

  `wire_api = "responses"` is the only value it accepts. `CODEX_HOME` (a directory of
  one's own) keeps its sessions, logs and config apart from the user's `~/.codex`.
- opencode: a provider in its config (`OPENCODE_CONFIG` names the file, or
  `OPENCODE_CONFIG_CONTENT` holds the JSON) with a base URL; with `"npm":
  "@ai-sdk/openai-compatible"` (bundled in the binary, nothing is downloaded) it calls
  `POST {baseURL}/chat/completions`::

      {"provider": {"fake": {"npm": "@ai-sdk/openai-compatible",
                             "options": {"baseURL": "http://127.0.0.1:PORT/v1", "apiKey": "x"},
                             "models": {"MODEL": {"name": "MODEL"}}}}}

  and `opencode run --format json -m fake/MODEL`. Without `--title` it first asks the
  model for a session title (a request without tools); `OPENCODE_DISABLE_AUTOUPDATE=1`,
  `OPENCODE_DISABLE_MODELS_FETCH=1`, `OPENCODE_DISABLE_SHARE=1` keep it off the network.

In-process::

    with FakeOpenAI() as server:
        server.script("*", [{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
                            {"text": "3"}])
        ...
        assert server.tool_outputs(server.requests[-1].body)

As a process: `python -m loopwire.testing.fake_openai --port 0 --script script.json` prints
`FAKE_OPENAI_URL=http://127.0.0.1:PORT` once it listens; `POST /_fake/script`
`{"model", "responses"}`, `POST /_fake/fail_next` `{"status", "n", "model"}`,
`POST /_fake/reset`, `GET /_fake/requests` steer it over HTTP.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypedDict

from .fake_anthropic import words_chunks
from .fake_openai_http import CHAT, RESPONSES, OpenAIApiHandler
from .fake_openai_wire import Answer, FunctionCall
from .fake_server import Failure, RecordedRequest, ResponseSpec, ScriptedServer


class ToolOutput(TypedDict):
    """A function's result a request sends back."""

    call_id: str | None
    output: str


Responder = Callable[[dict[str, Any], str], ResponseSpec | None]
"""`responder(body, path)`: a response spec for the request, or None for the default."""


def count_tokens(body: dict[str, Any]) -> int:
    """Deterministic input token count: a quarter of the characters of the request's
    instructions, input (or messages) and tools."""
    payload = {k: body.get(k) for k in ("instructions", "input", "messages", "tools")}
    return max(1, math.ceil(len(json.dumps(payload, separators=(",", ":"), sort_keys=True)) / 4))


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = [p.get("text", "") for p in content or [] if isinstance(p, dict)
             and p.get("type") in ("text", "input_text", "output_text")]
    return " ".join(t for t in parts if t)


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of a Responses or Chat Completions request."""
    items = body.get("input") if "input" in body else body.get("messages")
    if isinstance(items, str):
        return items
    for item in reversed(items or []):
        if isinstance(item, dict) and item.get("role") == "user":
            return _text_of(item.get("content"))
    return ""



def tool_outputs(body: dict[str, Any]) -> list[ToolOutput]:
    """The function results a request sends back: `[{"call_id", "output"}]`, from the
    Responses API's `function_call_output` items or Chat Completions' `tool` messages."""
    found: list[ToolOutput] = []
    if isinstance(body.get("input"), list):
        for item in body["input"]:
            if isinstance(item, dict) and item.get("type") in ("function_call_output", "custom_tool_call_output"):
                output = item.get("output")
                found.append({"call_id": item.get("call_id"),
                              "output": output if isinstance(output, str) else _text_of(output)})
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == "tool":
            found.append({"call_id": message.get("tool_call_id"), "output": _text_of(message.get("content"))})
    return found


def tool_names(body: dict[str, Any]) -> list[str]:
    """The names of the function tools a request offers; a tool inside a Responses
    `namespace` tool is `<namespace>__<name>` (codex's MCP tools: `mcp__<server>__<tool>`)."""
    names: list[str] = []
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "function":
            fn = tool.get("function")
            names.append(str((fn if isinstance(fn, dict) else tool).get("name")))
        elif tool.get("type") == "namespace":
            names.extend(f"{tool.get('name')}__{t.get('name')}" for t in tool.get("tools") or [] if isinstance(t, dict))
    return names


class FakeOpenAI(ScriptedServer[Failure]):
    """The fake server; `start()` serves on a free port in a background thread."""

    handler = OpenAIApiHandler
    thread_name = "fake-openai"

    responder: Responder | None = None

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self._counter = 0

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The server's root; the agents' base URL is `url + "/v1"` (`base_url`)."""
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    # -- steering ---------------------------------------------------------------------------
    def fail_next(self, status: int = 500, n: int | None = 1, model: str | None = None,
                  *, message: str | None = None) -> None:
        """Fail the next `n` model requests (for `model`, or any); `n=None`: all of them."""
        self._inject(Failure(status, n, model, message))

    def model_requests(self, path: str | None = None) -> list[dict[str, Any]]:
        """Bodies of the model requests so far (both APIs, or those to `path`)."""
        with self.lock:
            return [r.body for r in self.requests if r.path in ((path,) if path else (RESPONSES, CHAT))]

    @property
    def responses_requests(self) -> list[dict[str, Any]]:
        return self.model_requests(RESPONSES)

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        return self.model_requests(CHAT)

    tool_outputs = staticmethod(tool_outputs)
    tool_names = staticmethod(tool_names)
    last_user_text = staticmethod(last_user_text)

    def wait_for_requests(self, n: int, timeout: float = 10.0, path: str | None = None) -> list[RecordedRequest]:
        """Block until `n` model requests (to `path`, or to either API) arrived."""
        return self._wait_for((path,) if path else (RESPONSES, CHAT), n, timeout)

    # -- answering (called from handler threads) -----------------------------------------
    def _take_spec(self, body: dict[str, Any], path: str) -> ResponseSpec:
        scripted = self._scripted(str(body.get("model", "")))
        if scripted is not None:
            return scripted
        responder = self.responder
        if responder is not None:
            spec = responder(body, path)
            if spec is not None:
                return ResponseSpec(**spec)
        return {"text": f"Echo: {last_user_text(body)}"}

    def answer(self, body: dict[str, Any], spec: ResponseSpec) -> Answer:
        """The concrete answer to `body` for a response spec."""
        with self.lock:
            self._counter += 1
            n = self._counter
        text = spec.get("text")
        if text is None and spec.get("chunks"):
            text = "".join(spec["chunks"])
        text = text or ""
        calls: list[FunctionCall] = []
        for i, call in enumerate(spec.get("tool_calls") or spec.get("tool_use") or []):
            arguments = call.get("arguments", call.get("input", {}))
            calls.append(FunctionCall(id=f"fc_fake_{n:06d}_{i}", call_id=call.get("id") or f"call_fake_{n:06d}_{i}",
                                      name=call["name"], namespace=call.get("namespace"),
                                      arguments=arguments if isinstance(arguments, str) else json.dumps(arguments)))
        out_chars = len(text) + sum(len(c["arguments"]) + len(c["name"]) for c in calls)
        usage = {"input_tokens": count_tokens(body), "output_tokens": max(1, math.ceil(out_chars / 4)),
                 "cached_tokens": 0, "reasoning_tokens": 0}
        usage.update(spec.get("usage") or {})
        chunks = list(spec["chunks"]) if spec.get("chunks") else words_chunks(text)
        return Answer(f"resp_fake_{n:06d}", str(spec.get("model") or body.get("model") or ""), text, chunks,
                      calls, usage, float(spec.get("chunk_delay_s") or 0))


# -- pytest and command line ---------------------------------------------------------------
try:
    import pytest

    @pytest.fixture
    def openai_server() -> Iterator[FakeOpenAI]:
        """A started fake; import this name into a test module to use it as a fixture."""
        with FakeOpenAI() as server:
            yield server
except ImportError:  # pragma: no cover - the standalone process needs no pytest
    pass


def load_script(server: FakeOpenAI, path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if isinstance(data, list):
        server.script("*", data)
        return
    for model, responses in (data.get("scripts") or {}).items():
        server.script(model, responses)
    for f in data.get("failures") or []:
        server.fail_next(int(f.get("status", 500)), f.get("n", 1), f.get("model"), message=f.get("message"))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Fake OpenAI Responses and Chat Completions API for loopwire tests.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--script", help="JSON file of scripted responses")
    args = parser.parse_args(argv)
    server = FakeOpenAI(args.host, args.port)
    if args.script:
        load_script(server, args.script)
    server.start()
    print(f"FAKE_OPENAI_URL={server.url}", flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    server.stop()


if __name__ == "__main__":
    main()
