"""Where a fork cuts a session (shared/stores/lineage.py), on transcripts the router's own
core writes: at every event, the fork's history is one the router really had, with no
tool call left unanswered, as late as the last complete turn allows; a fork's lineage
reads its source's events up to the cut."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.memory.assembly import normalise_messages
from loopwire.shared.contract.protocol import make_event
from loopwire.shared.stores.event_log import InMemoryEventLog
from loopwire.shared.stores.lineage import FORKED, fork_point, lineage_events
from loopwire.shared.stores.transcript import replay
from tests.router_driver import Recorder, call

pytestmark = pytest.mark.unit


def two_runs() -> Recorder:
    """Run 1: two tool turns (two calls, then one), then an answer; run 2 (a follow-up):
    a tool turn with a steer arriving during the tools, then an answer."""
    d = Recorder()
    d.start(input="Add things.", system="be brief")
    d.answer("Adding.", call("t1"), call("t2", inp={"a": 2, "b": 2}))
    d.tools("4")
    d.answer("Once more.", call("t3", inp={"a": 5, "b": 5}))
    d.tools("10")
    d.answer("All added.")
    d.message("Now multiply.")
    d.answer("Multiplying.", call("t4", "mul"))
    d.steer("Use 7 instead.")
    d.answer("It is 49.")
    return d


def history_at(events: list[dict[str, Any]], cut: int) -> list[dict[str, Any]]:
    kept = [e for e in events if e["seq"] <= cut]
    replayed = replay("fork", kept) if kept else None
    return normalise_messages(replayed.history) if replayed is not None else []


def dangling(history: list[dict[str, Any]]) -> set[str]:
    used = {b["id"] for m in history for b in m["content"] if b.get("type") == "tool_use"}
    answered = {b["tool_use_id"] for m in history for b in m["content"] if b.get("type") == "tool_result"}
    return used - answered


def test_at_every_event_the_fork_holds_a_history_the_router_had_and_nothing_dangles() -> None:
    d = two_runs()
    events = d.transcript
    for at in range(1, len(events) + 1):
        point = fork_point(events, at)
        assert point.cut_seq <= at
        history = history_at(events, point.cut_seq)
        assert history in d.histories, f"at seq {at} (cut {point.cut_seq}): a history the router never had"
        assert not dangling(history), f"at seq {at}: a tool call left without its result"
        assert point.config is not None and point.config["system"] == "be brief", "the run's settings"


def test_between_runs_the_cut_is_the_event_inside_a_run_the_last_complete_turn() -> None:
    d = two_runs()
    events = d.transcript
    seq = {(e["kind"], e.get("tool_use_id") or e.get("turn") or e.get("status")): e["seq"] for e in events}
    first_end = next(e["seq"] for e in events if e["kind"] == "run.ended")
    assert fork_point(events, first_end).cut_seq == first_end
    whole = history_at(events, first_end)
    assert [m["role"] for m in whole] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert whole[-1]["content"] == [{"type": "text", "text": "All added."}]

    # The first batch's second result completes turn 1: the cut stays at the first until then.
    t1, t2 = seq[("tool.result", "t1")], seq[("tool.result", "t2")]
    turn_two = [e["seq"] for e in events if e["kind"] == "message" and e["turn"] == 2][0]
    assert fork_point(events, t1).cut_seq < t1, "half a batch is no complete turn"
    assert fork_point(events, turn_two).cut_seq == t2, "turn 2's calls unanswered: cut after turn 1"
    assert history_at(events, t2)[-1]["content"][-1]["tool_use_id"] == "t2"

    # Run 1 before any complete turn: cut before the run, its input included.
    started = [e["seq"] for e in events if e["kind"] == "run.started"]
    assert fork_point(events, started[0]).cut_seq == 0
    assert fork_point(events, started[0] + 1).cut_seq == 0
    assert fork_point(events, started[1]).cut_seq == first_end, "run 2's start: the history as run 1 left it"


def test_a_steer_that_cancels_the_tools_completes_their_turn() -> None:
    d = two_runs()
    events = d.transcript
    steer = next(e["seq"] for e in events if e["kind"] == "user.message" and e.get("source") == "steer")
    point = fork_point(events, steer)
    assert point.cut_seq == steer
    history = history_at(events, steer)
    assert not dangling(history) and "Use 7 instead." in str(history[-1])


def test_a_vacuous_answer_the_router_dropped_is_not_in_the_replayed_history() -> None:
    d = Recorder()
    d.start(input="What is the capital of France?")
    d.answer("")  # vacuous: retracted, not stored, asked again
    assert "retracted" in [e["kind"] for e in d.transcript]
    d.answer("Paris.")
    replayed = replay("s", d.transcript)
    assert replayed is not None
    assert normalise_messages(replayed.history) == normalise_messages(d.history)
    vacuous = next(e["seq"] for e in d.transcript if e["kind"] == "message")
    retracted = next(e["seq"] for e in d.transcript if e["kind"] == "retracted")
    assert fork_point(d.transcript, vacuous).cut_seq == vacuous, "at its message, the answer stood"
    assert fork_point(d.transcript, retracted).cut_seq == 0, "retracted: the cut goes back to before it"
    for at in range(retracted, len(d.transcript) + 1):  # once retracted, never in a fork's history
        assert history_at(d.transcript, fork_point(d.transcript, at).cut_seq) in d.histories


def forked(sid: str, source: str, at: int, cut: int, seqs_after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    first = make_event(FORKED, sid, None, seq=1, from_session_id=source, from_seq=at, cut_seq=cut,
                       config={"profile": "agentic", "models": ["m1"], "max_tokens": 100, "system": "forked"})
    return [first, *(make_event(e["kind"], sid, e.get("run_id"), seq=n + 2, **{
        k: v for k, v in e.items() if k not in ("v", "session_id", "run_id", "seq", "kind", "ts")})
        for n, e in enumerate(seqs_after))]


async def test_a_forks_lineage_is_its_sources_events_up_to_the_cut_then_its_own() -> None:
    d = two_runs()
    log = InMemoryEventLog()
    for e in d.transcript:
        await log.append("src", e, key=None)
    first_end = next(e["seq"] for e in d.transcript if e["kind"] == "run.ended")
    # The fork ran once: the second run of the source, replayed on it.
    run2 = [e for e in d.transcript if e["seq"] > first_end and e["kind"] != "error"]
    for e in forked("fork", "src", first_end, first_end, run2):
        await log.append("fork", e, key=None)
    lineage = await lineage_events("fork", log)
    assert [e["session_id"] for e in lineage] == ["src"] * first_end + ["fork"] * (len(run2) + 1)
    replayed = replay("fork", lineage, in_order=True)
    assert replayed is not None
    assert normalise_messages(replayed.history) == d.histories[-1], "the same conversation as the source's"
    assert replayed.run_config is not None and replayed.run_config["system"] == "be brief", \
        "the fork's own run after session.forked"
    only_fork = await lineage_events("fork", log, own=[e for e in lineage if e["session_id"] == "fork"][:1])
    config = replay("fork", only_fork, in_order=True)
    assert config is not None and config.run_config is not None and config.run_config["system"] == "forked"
    # a fork of the fork, cut at its session.forked: the source's run 1 alone
    for e in forked("grand", "fork", 1, 1, []):
        await log.append("grand", e, key=None)
    grand = await lineage_events("grand", log)
    assert [e["session_id"] for e in grand] == ["src"] * first_end + ["fork", "grand"]
    replayed = replay("grand", grand, in_order=True)
    assert replayed is not None and normalise_messages(replayed.history) == history_at(d.transcript, first_end)
