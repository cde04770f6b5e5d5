"""The loop pipeline and profiles of the 2026-12-02 protocol additions, through the public
contract only (plain nats-py, the fake Messages API, tools served with nats.micro), in the
deployed layout (one `loopwire serve` per service, two routers): phases from `init`,
accumulated answers and `message_count`, turn_by_turn's routing rows, model tiers, and
the context fields."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.memory.observations import OBSERVATION_SYSTEM
from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, connected, serving_tools, started_system
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e

MEMORY_MODEL = "m-operator-memory"
"""The operator's LOOPWIRE_MEMORY_MODEL: observations of a run that names no model of its
own for them are asked of it, so they never take a reply scripted for a run's model."""


@pytest.fixture(scope="module")
def split(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    with started_system(fake_anthropic, layout="split", LOOPWIRE_MEMORY_MODEL=MEMORY_MODEL,
                        LOOPWIRE_MEMORY_OBSERVE_EVERY_TURNS="2") as lw:
        yield lw


@pytest.fixture
async def client(split: LoopwireContainer) -> AsyncIterator[NatsClient]:
    async with connected(split) as nc:
        yield nc


@pytest.fixture
async def provider(client: NatsClient) -> AsyncIterator[ToolProvider]:
    async with serving_tools(client) as tools:
        yield tools


def sid() -> str:
    return f"e2e-pipe-{uuid.uuid4().hex[:10]}"


def phases(ev: SessionEvents) -> list[tuple[str, str]]:
    return [(p["from"], p["to"]) for p in ev.of("phase.changed")]


def kinds_in_seq_order(ev: SessionEvents) -> list[str]:
    return [e["kind"] for e in sorted(ev.durable(), key=lambda e: e["seq"])]


async def test_phases_from_init_answers_joined_and_the_message_count(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    """A vacuous answer (retracted: never counts), a promise nudged by the commitment gate
    (an answer), a tool turn (not one), the result (an answer): the final text is the two
    answers in order; the run reports init→execute, then execute→done before run.ended;
    its tool provider gets the run's user and workspace ids."""
    fake.script("m-run", [{"text": "."}, {"text": "Let me add the numbers."},
                          {"tool_use": [{"name": "add", "input": {"a": 40, "b": 2}}]}, {"text": "The sum is 42."}])
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "What is 40 + 2?", "tools": ["add"], "model": {"primary": "m-run"},
                                   "user_id": "user-42", "metadata": {"workspace_id": "ws-7"}})
        ended = await ev.wait_for("run.ended")
        session = await query(client, "session.get", {"session_id": s})
    ev.check_bodies()
    assert len(ev.of("retracted")) == 1
    assert ended["status"] == "completed"
    assert ended["final_text"] == "Let me add the numbers.\n\nThe sum is 42."
    assert phases(ev) == [("init", "execute"), ("execute", "done")]
    # memory.observation is written in the background (docs/protocol.md): it may take a
    # seq after run.ended, and is not one of the run's phases.
    kinds = [k for k in kinds_in_seq_order(ev) if k != "memory.observation"]
    assert kinds[:2] == ["run.started", "phase.changed"] and kinds[-2:] == ["phase.changed", "run.ended"]
    assert ended["message_count"] == len(session["messages"]) == 6, \
        "request, promise, nudge, call, result, answer (the retracted '.' is not stored)"
    (_name, _input, headers), = provider.calls
    assert (headers.get("Loopwire-User-Id"), headers.get("Loopwire-Workspace-Id")) == ("user-42", "ws-7")
    assert (session["user_id"], session["workspace_id"], session["tools_active"]) == ("user-42", "ws-7", None)


async def test_turn_by_turn_reviews_again_after_execute_and_ends_a_cut_reply(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    """turn_by_turn: the execute phase's end of turn moves to review and asks again; the
    new generation's proposal is what the user approves; a reply cut by max_tokens ends
    the run with what it has, without a proposal to approve."""
    fake.script("m-tbt", [{"text": "I will add.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 2}}]},
                          {"text": "Done: 2 + 2 = 4."}, {"text": "The answer is 4."},
                          {"text": "Four, because two and two make", "stop_reason": "max_tokens"}])
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "What is 2 + 2?", "profile": "turn_by_turn", "tools": ["add"],
                                   "model": {"primary": "m-tbt"}})
        calls = await ev.wait_for("approval.requested")
        waiting = await query(client, "session.get", {"session_id": s})
        await ev.publish("decision", {"checkpoint_id": calls["checkpoint_id"], "decision": "approve"})
        proposal = await ev.wait_for("approval.requested", count=2)
        await ev.publish("decision", {"checkpoint_id": proposal["checkpoint_id"], "decision": "approve"})
        first = await ev.wait_for("run.ended")
        await ev.publish("message", {"content": "Why?"})
        cut = await ev.wait_for("run.ended", count=2)
    ev.check_bodies()
    assert waiting["status"] == "awaiting_approval" and waiting["tools_active"] == ["add"]
    assert proposal["proposal"] == "The answer is 4.", "the review generation's, not the execute phase's words"
    generations = [r for r in fake.message_requests if r["model"] == "m-tbt"]
    assert len(generations) == 4 and "Phase: review" in generations[2]["messages"][-1]["content"][0]["text"]
    assert (first["status"], first["final_text"]) == ("completed", "The answer is 4.")
    assert (cut["status"], cut["final_text"]) == ("completed", "Four, because two and two make")
    assert len(ev.of("approval.requested")) == 2, "a cut reply is no proposal"
    assert phases(ev) == [("init", "review"), ("review", "execute"), ("execute", "review"), ("review", "execute"),
                          ("execute", "done"), ("init", "review"), ("review", "done")]


def observations_of(fake: FakeAnthropic) -> list[dict[str, Any]]:
    return [r for r in fake.message_requests if r.get("system") == OBSERVATION_SYSTEM]


async def test_auto_selection_runs_the_lightweight_work_on_the_lightweight_model(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    """`model.selection: auto`: the plan is built by `model.lightweight`, the execute and
    verify phases by the primary, and memory's observations by the lightweight model too
    (over the operator's LOOPWIRE_MEMORY_MODEL); each `message` names its model."""
    plan = {"name": "update_plan", "input": {"plan": [{"step": "add 2 and 3", "status": "pending"}]}}
    done = {"name": "update_plan", "input": {"plan": [{"step": "add 2 and 3", "status": "completed"}]}}
    fake.script("m-light", [{"tool_use": [plan]}])
    fake.script("m-main", [{"tool_use": [{"name": "add", "input": {"a": 2, "b": 3}}, done]},
                           {"text": "Verified: 2 + 3 = 5."}])
    s = sid()
    async with SessionEvents(client, s) as ev:
        await ev.publish("start", {"input": "add 2 and 3", "profile": "agentic_planned", "tools": ["add"],
                                   "model": {"primary": "m-main", "lightweight": "m-light", "selection": "auto"}})
        ended = await ev.wait_for("run.ended")
        await ev.wait_for("memory.observation")
    ev.check_bodies()
    assert ended["status"] == "completed" and ended["final_text"] == "Verified: 2 + 3 = 5."
    assert [m["model"] for m in ev.of("message")] == ["m-light", "m-main", "m-main"]
    assert {r["model"] for r in observations_of(fake)} == {"m-light"}
    assert phases(ev) == [("init", "plan"), ("plan", "execute"), ("execute", "verify"), ("verify", "done")]


async def test_manual_selection_keeps_every_generation_on_the_primary(
        client: NatsClient, fake: FakeAnthropic, provider: ToolProvider) -> None:
    fake.script("m-main", [{"tool_use": [{"name": "update_plan", "input": {"plan": ["answer"]}}]},
                           {"text": "The answer."}, {"text": "The answer, again."}, {"text": "Checked: the answer."}])
    async with SessionEvents(client, sid()) as ev:
        await ev.publish("start", {"input": "answer", "profile": "agentic_planned", "tools": ["add"],
                                   "model": {"primary": "m-main", "lightweight": "m-light"}})
        ended = await ev.wait_for("run.ended")
        await ev.wait_for("memory.observation")
    assert ended["status"] == "completed"
    assert {m["model"] for m in ev.of("message")} == {"m-main"}, "manual is the default"
    assert {r["model"] for r in observations_of(fake)} == {MEMORY_MODEL}, "the operator's memory model"
