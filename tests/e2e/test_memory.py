"""Memory end to end, through the public contract: a 200-turn conversation under a small
context window (compactions, and the model keeps the facts and the latest turns),
observations in the transcript, a session rebuilt from its transcript after its Redis
state is deleted, and bad input lists that store nothing."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from loopwire.memory.compaction import SUMMARY_SYSTEM
from loopwire.memory.observations import OBSERVATION_SYSTEM, REFLECTION_SYSTEM
from loopwire.shared.contract import keys
from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic, count_tokens

from .events import SessionEvents, query
from .model_requests import system_text

pytestmark = pytest.mark.e2e

CODE = re.compile(r"secret code is ([A-Z]+-\d+)")
NAME = re.compile(r"[Mm]y name is (\w+)")


def sid() -> str:
    return f"e2e-mem-{uuid.uuid4().hex[:10]}"


def everything(body: dict[str, Any]) -> str:
    return json.dumps([body.get("system"), body.get("messages")])


def remembering_model(body: dict[str, Any]) -> dict[str, Any]:
    """A model that knows only what the request holds: it answers with the facts it can
    find in it, and its summaries keep those facts (as a good summary would)."""
    seen = everything(body)
    code = CODE.search(seen)
    name = NAME.search(seen)
    facts = []
    if name:
        facts.append(f"The user's name is {name.group(1)}.")
    if code:
        facts.append(f"The user's secret code is {code.group(1)}.")
    system = body.get("system")
    if system == SUMMARY_SYSTEM:
        return {"text": "Summary of the earlier conversation. " + " ".join(facts).replace("user's secret code is",
                                                                                        "user said: my secret code is")}
    if system == OBSERVATION_SYSTEM:
        return {"text": "Observed: " + (" ".join(facts) or "nothing yet.")}
    if system == REFLECTION_SYSTEM:
        return {"text": "Reflection: the user quizzes the assistant about remembered facts."}
    last = body["messages"][-1]["content"]
    question = next((b["text"] for b in last if b.get("type") == "text"), "")
    turn = re.search(r"Question (\d+)", question)
    n = turn.group(1) if turn else "?"
    known_name = name.group(1) if name else "stranger"
    known_code = code.group(1) if code else "unknown"
    return {"text": f"Answer {n}: {known_name}, your code is {known_code}."}


async def test_a_200_turn_conversation_stays_under_a_small_window_and_keeps_its_history(
        nc: NatsClient, fake: FakeAnthropic) -> None:
    fake.responder = remembering_model
    window = 2500
    s = sid()
    padding = "Some small talk to fill the context a little. " * 2
    started = time.monotonic()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "Question 1: hello! My name is Ada. " + padding, "profile": "conversational",
                                   "limits": {"context_window": window}})
        await ev.wait_for("run.ended")
        for n in range(2, 201):
            text = f"Question {n}: what do you remember? {padding}"
            if n == 5:
                text = f"Question 5: note this, my secret code is ZEBRA-42. {padding}"
            await ev.publish("message", {"content": text})
            ended = await ev.wait_for("run.ended", count=n, timeout=30)
            assert ended["status"] == "completed", ended
        # Observations run in the background and catch up with the latest turn: the last
        # one leaves fewer than 10 model turns unobserved (history index >= 381 of 399),
        # and every 5th observation is followed by a reflection.
        observed = 0
        while True:
            observed += 1
            last = await ev.wait_for("memory.observation", count=observed, timeout=30)
            if last["to_message"] >= 381:
                break
        if observed >= 5:
            await ev.wait_for("memory.reflection", count=observed // 5, timeout=30)
    elapsed = time.monotonic() - started
    assert elapsed < 60, f"200 turns took {elapsed:.1f}s"

    runs = ev.of("run.ended")
    assert len(runs) == 200
    for n, run in enumerate(runs, start=1):
        if n >= 6:
            assert run["final_text"] == f"Answer {n}: Ada, your code is ZEBRA-42.", f"turn {n} forgot"
    ev.check_bodies()

    compactions = ev.of("compaction")
    threshold = window * 0.8  # the conversational profile's compaction_at_pct (docs/profiles.md)
    assert len(compactions) >= 5, "a small window compacts again and again"
    for c in compactions:
        assert c["tokens_before"] >= threshold > c["tokens_after"], c
        assert c["method"] == "summary"

    # What the model saw: never more than the window, always the latest turns verbatim.
    turns = [b for b in fake.message_requests if b.get("system") not in (SUMMARY_SYSTEM, OBSERVATION_SYSTEM,
                                                                          REFLECTION_SYSTEM)]
    assert len(turns) == 200
    for n, body in enumerate(turns, start=1):
        assert count_tokens(body) <= window, f"turn {n} sent {count_tokens(body)} tokens"
        assert "My name is Ada" in json.dumps(body["messages"][0]), "the first request is always kept"
        if n > 1:
            assert body["messages"][-2]["content"][-1]["text"].startswith(f"Answer {n - 1}:")
    summaries = [b for b in fake.message_requests if b.get("system") == SUMMARY_SYSTEM]
    assert len(summaries) == len(compactions)

    # The full history is kept: the session holds all 400 messages, the transcript every turn.
    session = await query(nc, "session.get", {"session_id": s})
    assert len(session["messages"]) == 400 and session["turns"] == 200
    # The summaries are paid for by the runs that needed them (GenerationResult.extra_usage).
    charged = sum(r["usage"]["input_tokens"] for r in runs)
    assert charged >= sum(count_tokens(b) for b in turns) + sum(count_tokens(b) for b in summaries)
    observations = ev.of("memory.observation")
    assert len(observations) >= 10 and "Ada" in observations[0]["observation"]
    assert any("ZEBRA-42" in o["observation"] for o in observations)
    assert len(ev.of("memory.reflection")) == len(observations) // 5
    assert [b.get("system") for b in fake.message_requests].count(OBSERVATION_SYSTEM) == len(observations)


@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
    [],
])
async def test_an_input_list_breaking_the_alternation_rules_is_rejected_and_stores_nothing(
        nc: NatsClient, fake: FakeAnthropic, messages: list[dict[str, Any]]) -> None:
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": messages})
        error = await ev.wait_for("error")
    assert error["code"] == "invalid_body"
    assert error["message"].startswith("invalid start body: input")
    assert any(word in error["message"] for word in ("alternate", "role 'user'", "at least one message"))
    assert (await query(nc, "session.get", {"session_id": s}))["status"] == "unknown"
    transcript = await query(nc, "transcript.get", {"session_id": s})
    assert [e["kind"] for e in transcript["events"]] == ["error"]
    assert fake.message_requests == []


async def test_a_session_is_rebuilt_from_its_transcript(nc: NatsClient, fake: FakeAnthropic,
                                                        system: LoopwireContainer) -> None:
    fake.responder = remembering_model
    s = sid()
    async with SessionEvents(nc, s) as ev:
        await ev.publish("start", {"input": "Hi, my name is Ada and my secret code is OWL-7.",
                                   "profile": "conversational", "system": "Be brief."})
        await ev.wait_for("run.ended")
        await ev.publish("message", {"content": "Question 2: anything?"})
        await ev.wait_for("run.ended", count=2)

        redis = aioredis.from_url(system.get_redis_url())
        assert await redis.delete(keys.session_state(s), keys.session_history(s)) == 2
        await redis.aclose()
        gone = await query(nc, "session.get", {"session_id": s})
        assert gone.get("source") == "transcript" and len(gone["messages"]) == 4

        await ev.publish("message", {"content": "Question 3: who am I?"})
        third = await ev.wait_for("run.ended", count=3)
    assert third["final_text"] == "Answer 3: Ada, your code is OWL-7."
    request = fake.message_requests[-1]
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "user", "assistant", "user"]
    assert system_text(request).startswith("Be brief.")
    session = await query(nc, "session.get", {"session_id": s})
    assert "source" not in session and len(session["messages"]) == 6 and session["runs"] == 3
