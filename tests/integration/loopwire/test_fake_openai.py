"""The fake OpenAI API (loopwire.testing.fake_openai) over real HTTP: the Responses API and
Chat Completions, streamed and not, as the codex and opencode agents read them (their own
tests: tests/e2e/test_executor_codex.py, tests/e2e/test_executor_opencode.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fakes.openai_server import FakeOpenAI, tool_outputs

pytestmark = pytest.mark.integration


@pytest.fixture
def openai_server() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def sse(raw: bytes) -> list[tuple[str | None, Any]]:
    """(event name, data) of each SSE event; `[DONE]` stays a string."""
    events = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        name = None
        data = ""
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
        events.append((name, data if data == "[DONE]" else json.loads(data)))
    return events


def test_responses_stream_text_then_function_call(openai_server: FakeOpenAI) -> None:
    openai_server.script("gpt-x", [{"text": "Let me add.", "chunks": ["Let ", "me add."],
                                    "tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}, "id": "call_9"}],
                                    "usage": {"input_tokens": 40, "output_tokens": 7}}])
    status, raw = post(f"{openai_server.base_url}/responses",
                       {"model": "gpt-x", "stream": True, "input": [{"role": "user", "content": "add 1 and 2"}]})
    assert status == 200
    events = sse(raw)
    kinds = [data["type"] for _, data in events]
    assert [name for name, _ in events] == kinds  # the `event:` line names each data's type
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    assert [d["delta"] for _, d in events if d["type"] == "response.output_text.delta"] == ["Let ", "me add."]
    arguments = "".join(d["delta"] for _, d in events if d["type"] == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"a": 1, "b": 2}
    done = [d["item"] for _, d in events if d["type"] == "response.output_item.done"]
    assert [i["type"] for i in done] == ["message", "function_call"]
    assert done[0]["content"][0]["text"] == "Let me add."
    assert done[1]["call_id"] == "call_9" and done[1]["name"] == "add"
    completed = events[-1][1]["response"]
    assert completed["status"] == "completed"
    assert completed["usage"]["input_tokens"] == 40 and completed["usage"]["total_tokens"] == 47
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    assert openai_server.responses_requests[0]["input"][0]["content"] == "add 1 and 2"


def test_responses_function_output_read_back_and_namespaced_call(openai_server: FakeOpenAI) -> None:
    openai_server.script("*", [{"tool_calls": [{"name": "echo", "namespace": "mcp__lw", "arguments": "{}"}]}])
    body = {"model": "m", "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "function_call", "call_id": "c1", "name": "echo", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "echo: hi"}]}
    status, raw = post(f"{openai_server.base_url}/responses", body)
    assert status == 200
    response = json.loads(raw)
    assert response["output"][0]["namespace"] == "mcp__lw"
    assert tool_outputs(openai_server.responses_requests[0]) == [{"call_id": "c1", "output": "echo: hi"}]
    assert openai_server.last_user_text(body) == "go"


def test_chat_completions_stream_tool_calls_and_usage(openai_server: FakeOpenAI) -> None:
    openai_server.script("*", [{"tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]}, {"text": "done"}])
    status, raw = post(f"{openai_server.base_url}/chat/completions", {
        "model": "m", "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "list"}],
        "tools": [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]})
    assert status == 200
    events = sse(raw)
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    calls = [tc for c in chunks for ch in c["choices"] for tc in ch["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "bash" and calls[0]["id"].startswith("call_")
    assert json.loads("".join(tc["function"]["arguments"] for tc in calls)) == {"command": "ls"}
    finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
    assert finishes == ["tool_calls"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] > 0
    assert openai_server.tool_names(openai_server.chat_requests[0]) == ["bash"]

    status, raw = post(f"{openai_server.base_url}/chat/completions", {
        "model": "m", "messages": [{"role": "user", "content": "list"},
                                   {"role": "tool", "tool_call_id": calls[0]["id"], "content": "a.txt"}]})
    completion = json.loads(raw)
    assert completion["choices"][0]["message"]["content"] == "done"
    assert completion["choices"][0]["finish_reason"] == "stop"
    assert tool_outputs(openai_server.chat_requests[1]) == [{"call_id": calls[0]["id"], "output": "a.txt"}]


def test_echo_without_script_failures_and_bad_requests(openai_server: FakeOpenAI) -> None:
    status, raw = post(f"{openai_server.base_url}/responses", {"model": "m", "input": "hello"})
    assert status == 200 and json.loads(raw)["output"][0]["content"][0]["text"] == "Echo: hello"
    openai_server.fail_next(503, n=1, message="try later")
    status, raw = post(f"{openai_server.base_url}/chat/completions", {"model": "m", "messages": []})
    assert status == 503 and json.loads(raw)["error"]["message"] == "try later"
    status, _ = post(f"{openai_server.base_url}/chat/completions", {"model": "m", "messages": []})
    assert status == 200
    status, raw = post(f"{openai_server.base_url}/responses", {"model": "m"})
    assert status == 400 and "input" in json.loads(raw)["error"]["message"]
    assert len(openai_server.model_requests()) == 4
    assert len(openai_server.wait_for_requests(4, timeout=1)) == 4


def test_responder_answers_from_the_request(openai_server: FakeOpenAI) -> None:
    seen: list[str] = []

    def responder(body: dict[str, Any], path: str) -> dict[str, Any]:
        seen.append(path)
        return {"text": f"{len(tool_outputs(body))} results"}

    openai_server.responder = responder
    status, raw = post(f"{openai_server.base_url}/responses", {"model": "m", "input": [
        {"type": "function_call_output", "call_id": "c", "output": "x"}]})
    assert json.loads(raw)["output"][0]["content"][0]["text"] == "1 results"
    assert seen == ["/v1/responses"]


def test_as_a_process_steered_over_http(tmp_path: Any) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"scripts": {"m": [{"text": "from file"}]}}))
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.openai_server", "--port", "0", "--script", str(script)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("FAKE_OPENAI_URL=")
        url = line.split("=", 1)[1]
        status, raw = post(f"{url}/v1/responses", {"model": "m", "input": "x"})
        assert json.loads(raw)["output"][0]["content"][0]["text"] == "from file"
        post(f"{url}/_fake/script", {"model": "*", "responses": [{"text": "steered"}]})
        status, raw = post(f"{url}/v1/chat/completions", {"model": "other", "messages": []})
        assert json.loads(raw)["choices"][0]["message"]["content"] == "steered"
        with urllib.request.urlopen(f"{url}/_fake/requests", timeout=5) as response:
            assert [r["path"] for r in json.loads(response.read())["requests"]] == ["/v1/responses",
                                                                                   "/v1/chat/completions"]
    finally:
        proc.terminate()
        proc.wait(10)
