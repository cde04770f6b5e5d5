"""Fork and replay through the public contract, in the deployed layout (one `loopwire serve`
per service, two routers): `loopwire.api.session.fork` at a run's end and inside a run, its
error codes, a fork's lineage; `loopwire replay` against another scripted model (the
comparison, `--json`, the exit status), and a replay with recorded tools that calls no
tool provider."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.client import LoopwireClient
from loopwire.testing import LoopwireContainer, assert_replay_holds, replay_session
from tests.fakes.anthropic_server import FakeAnthropic

from .cli_driver import on_system
from .conftest import ToolProvider, connected, serve_tools, started_system, wait_for_tools

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def system(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    with started_system(fake_anthropic, layout="split") as lw:
        yield lw


@pytest.fixture
async def lw(system: LoopwireContainer) -> AsyncIterator[LoopwireClient]:
    async with await LoopwireClient.connect(system.get_nats_url()) as client:
        yield client


@pytest.fixture
async def provider(system: LoopwireContainer) -> AsyncIterator[ToolProvider]:
    async with connected(system) as nc:
        tools, svc = await serve_tools(nc)
        await wait_for_tools(nc, {"add"})
        yield tools
        await svc.stop()


def sid(what: str = "f") -> str:
    return f"{what}-{uuid.uuid4().hex[:8]}"


def texts(messages: list[dict[str, Any]]) -> list[str]:
    """Each message's text (tool blocks as `use:<name>` / `result:<content>`)."""
    out = []
    for m in messages:
        content = m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
        out.append(" ".join(b.get("text") or (f"use:{b['name']}" if b["type"] == "tool_use" else
                                               f"result:{b.get('content')}") for b in content))
    return out


async def follow_up(lw: LoopwireClient, s: str, content: str) -> dict[str, Any]:
    """A `message` on an idle session, followed to the end of the run it starts."""
    async with await lw.follow(s, new_only=True) as events:
        await lw.publish(s, "message", {"v": 1, "content": content}, msg_id=uuid.uuid4().hex)
        async for event in events:
            if event["kind"] == "run.ended":
                return event
    raise AssertionError("no run.ended")


async def test_a_fork_at_the_first_run_end_sees_only_the_first_exchange(lw: LoopwireClient, fake: FakeAnthropic
                                                                       ) -> None:
    fake.script("*", [{"text": "Noted: ALPHA-7."}, {"text": "Paris."}, {"text": "Your code is ALPHA-7."},
                      {"text": "It was Paris."}])
    src = sid("src")
    first = await lw.run(src, {"input": "My code is ALPHA-7.", "tools": [], "system": "Be terse."}, timeout=60)
    assert first["status"] == "completed"
    assert (await follow_up(lw, src, "Capital of France?"))["status"] == "completed"
    events = await lw.transcript(src)
    first_end = next(e["seq"] for e in events if e["kind"] == "run.ended")

    fork = sid("fork")
    reply = await lw.fork(src, fork, at_seq=first_end)
    assert reply["session_id"] == fork and reply["forked_from"] == {"session_id": src, "seq": first_end}
    state = await lw.session_get(fork)
    assert state["status"] == "idle" and texts(state["messages"]) == ["My code is ALPHA-7.", "Noted: ALPHA-7."]
    assert state["forked_from"]["session_id"] == src
    (forked,) = (await lw.transcript(fork))[:1]
    assert forked["kind"] == "session.forked" and forked["seq"] == 1
    assert (forked["from_session_id"], forked["from_seq"]) == (src, first_end)
    assert (await lw.session_get(src))["forks"] == [fork]

    # a message to the fork: the model sees the first exchange only, with the run's settings
    assert (await follow_up(lw, fork, "What was my code?"))["status"] == "completed"
    request = fake.message_requests[-1]
    assert texts(request["messages"]) == ["My code is ALPHA-7.", "Noted: ALPHA-7.", "What was my code?"]
    assert "Be terse." in json.dumps(request.get("system")), "the run settings of the run it was forked in"
    # the source's next message sees its own full history: the fork changed nothing of it
    assert (await follow_up(lw, src, "And the city?"))["status"] == "completed"
    assert texts(fake.message_requests[-1]["messages"]) == [
        "My code is ALPHA-7.", "Noted: ALPHA-7.", "Capital of France?", "Paris.", "And the city?"]


async def test_a_fork_inside_a_run_cuts_at_its_last_complete_turn(lw: LoopwireClient, fake: FakeAnthropic,
                                                                  provider: ToolProvider) -> None:
    fake.script("*", [{"tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}]},
                      {"tool_use": [{"name": "add", "input": {"a": 3, "b": 4}}]},
                      {"text": "3 and 7."}, {"text": "Forked on."}])
    src = sid("src")
    assert (await lw.run(src, {"input": "Add 1+2, then 3+4.", "tools": ["add"]}, timeout=60))["status"] == "completed"
    events = await lw.transcript(src)
    second_call = [e for e in events if e["kind"] == "tool.call"][1]
    first_result = [e for e in events if e["kind"] == "tool.result"][0]

    fork = sid("fork")
    reply = await lw.fork(src, fork, at_seq=second_call["seq"])  # turn 2's call: no result yet
    assert reply["forked_from"]["seq"] == second_call["seq"] and reply["cut_seq"] == first_result["seq"]
    history = (await lw.session_get(fork))["messages"]
    assert texts(history) == ["Add 1+2, then 3+4.", "use:add", "result:3"], "turn 2's unanswered call dropped"
    assert (await follow_up(lw, fork, "Go on."))["status"] == "completed"
    sent = fake.message_requests[-1]["messages"]
    uses = {b["id"] for m in sent for b in m["content"] if isinstance(b, dict) and b.get("type") == "tool_use"}
    answered = {b["tool_use_id"] for m in sent for b in m["content"]
                if isinstance(b, dict) and b.get("type") == "tool_result"}
    assert uses == answered and len(uses) == 1, "no dangling tool call reaches the model"


async def test_fork_errors_and_a_retried_fork(lw: LoopwireClient, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "hello"}])
    src = sid("src")
    assert (await lw.run(src, {"input": "hi", "tools": []}, timeout=60))["status"] == "completed"
    last = (await lw.transcript(src))[-1]["seq"]

    async def code(**body: Any) -> str:
        reply = await lw.nc.request("loopwire.api.session.fork", json.dumps(body).encode(), timeout=10)
        return str(json.loads(reply.data)["error"]["code"])

    assert await code(session_id=sid("nobody"), new_session_id=sid()) == "unknown_session"
    assert await code(session_id=src, new_session_id=src) == "session_exists"
    assert await code(session_id=src, new_session_id=sid(), at_seq=0) == "invalid_seq"
    assert await code(session_id=src, new_session_id=sid(), at_seq=last + 1) == "invalid_seq"
    assert await code(session_id=src, new_session_id="not an id") == "invalid_session_id"
    assert await code(session_id=src) == "invalid_request"
    fork = sid("fork")
    made = await lw.fork(src, fork)
    assert made["forked_from"] == {"session_id": src, "seq": last}, "at_seq omitted: the last event"
    assert await lw.fork(src, fork) == made, "the same fork asked again, untouched since: the same answer"
    assert await code(session_id=src, new_session_id=fork, at_seq=1) == "session_exists"
    taken = sid("taken")
    assert (await lw.run(taken, {"input": "mine", "tools": []}, timeout=60))["status"] == "completed"
    assert await code(session_id=src, new_session_id=taken) == "session_exists"
    # a fork of the fork: its history is the source's still
    grand = sid("grand")
    await lw.fork(fork, grand)
    assert texts((await lw.session_get(grand))["messages"]) == ["hi", "hello"]


async def test_replay_against_another_model_reports_the_difference(system: LoopwireContainer, lw: LoopwireClient,
                                                                   fake: FakeAnthropic) -> None:
    fake.script("model-a", [{"text": "Paris is the capital."}, {"text": "About 2.1 million."}])
    src = sid("src")
    start = {"input": "Capital of France?", "tools": [], "model": {"primary": "model-a"}}
    assert (await lw.run(src, start, timeout=60))["status"] == "completed"
    assert (await follow_up(lw, src, "Its population?"))["status"] == "completed"
    # model-b: another first answer, and a refused request for the second run (status failed)
    fake.script("model-b", [{"text": "Lyon is the capital."},
                            {"error": {"status": 400, "type": "invalid_request_error", "message": "no"}}])

    result = await on_system(system, "replay", src, "--model", "model-b", "--json", timeout=120)
    assert result.code == 1, result.out + result.err  # run 2's status differs
    report = json.loads(result.out)
    assert report["source_session"] == src and report["differs"] is True
    one, two = report["runs"]
    assert one["source"]["status"] == one["replay"]["status"] == "completed" and not one["status_differs"]
    assert one["text_differs"] and "-Paris is the capital." in one["text_diff"] \
        and "+Lyon is the capital." in one["text_diff"]
    assert one["source"]["models"] == ["model-a"] and one["replay"]["models"] == ["model-b"]
    assert two["status_differs"] and (two["source"]["status"], two["replay"]["status"]) == ("completed", "failed")
    # the replay sent the same inputs: the second run's input reached model-b
    replayed = report["replay_session"]
    assert texts((await lw.session_get(replayed))["messages"])[:3] == [
        "Capital of France?", "Lyon is the capital.", "Its population?"]
    # readable: side by side, with the diff
    fake.script("model-a", [{"text": "Paris is the capital."}, {"text": "About 2.1 million."}])
    shown = await on_system(system, "replay", src, "--model", "model-a", timeout=120)
    assert shown.code == 0, shown.out + shown.err
    assert "same statuses in every run" in shown.out and "run 1" in shown.out and "run 2" in shown.out


async def test_replay_with_recorded_tools_calls_no_tool_provider(lw: LoopwireClient, fake: FakeAnthropic,
                                                                 provider: ToolProvider, nc: NatsClient) -> None:
    fake.script("*", [{"tool_use": [{"name": "add", "input": {"a": 20, "b": 22}}]}, {"text": "42."}])
    src = sid("src")
    assert (await lw.run(src, {"input": "20 + 22?", "tools": ["add"]}, timeout=60))["status"] == "completed"
    assert len(provider.calls) == 1
    # The replay's model calls add twice: with the recorded input, and with one never recorded.
    fake.script("*", [{"tool_use": [{"name": "add", "input": {"b": 22, "a": 20}},
                                    {"name": "add", "input": {"a": 1, "b": 1}}]}, {"text": "42, and 2."}])
    report = await replay_session(lw, src, tools="recorded")  # loopwire.testing's, a user's suite's
    assert len(provider.calls) == 1, "recorded tools: no call reached the provider"
    assert_replay_holds(report)
    assert report.runs[0].replay is not None and report.runs[0].tool_calls_differ
    events = await lw.transcript(report.replay_session)
    # The tools service records each result as its call ends, so the two may land in either
    # order; compare them in the order the model asked for them.
    asked = [b["id"] for e in events if e["kind"] == "message"
             for b in e["message"]["content"] if isinstance(b, dict) and b.get("type") == "tool_use"]
    results = sorted((e for e in events if e["kind"] == "tool.result"), key=lambda e: asked.index(e["tool_use_id"]))
    assert [(r["content"], r["is_error"], r.get("recorded")) for r in results] == [
        ("42", False, True),
        ("no recorded result for add with this input in session " + src + ": the replay ran no tool", True, True)]
    # live: the tools run for real
    fake.script("*", [{"tool_use": [{"name": "add", "input": {"a": 20, "b": 22}}]}, {"text": "42."}])
    live = await replay_session(lw, src, tools="live")
    live_results = [e for e in await lw.transcript(live.replay_session) if e["kind"] == "tool.result"]
    assert len(provider.calls) == 2 and not live.differs, (live_results, str(live))
    assert not nc.is_closed
