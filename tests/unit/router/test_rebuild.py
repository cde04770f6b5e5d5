"""Sessions rebuilt from their transcript: the history the events describe, an idle state
the router can load, stored without overwriting anything; and `session.get` answering
from the transcript when the state is gone."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.memory.assembly import normalise_messages
from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig, decide
from loopwire.router.core.effects import EmitEvent, PublishWork
from loopwire.router.shell.rebuild import idle_state, reconstruct
from loopwire.shared.contract.envelopes import GenerationResult, ToolResultItem, ToolsResult, Usage
from loopwire.shared.contract.events import user_message_fields
from loopwire.shared.contract.protocol import FollowUp, StartRun, make_event
from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.stores.transcript import replay

SID = "s1"


def ev(kind: str, seq: int, run_id: str = "r1", **fields: Any) -> dict[str, Any]:
    return make_event(kind, SID, run_id, seq=seq, **fields)


def user(content: list[dict[str, Any]] | str, source: str = "input") -> dict[str, Any]:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return {"turn": 0, "message": {"role": "user", "content": blocks}, "source": source}


def assistant(*blocks: dict[str, Any]) -> dict[str, Any]:
    return {"turn": 1, "message": {"role": "assistant", "content": list(blocks)}, "model": "claude-a",
            "stop_reason": "end_turn", "usage": {"input_tokens": 10, "output_tokens": 5}}


def t(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def use(tid: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": "add", "input": {"a": 1, "b": 2}}


def transcript() -> list[dict[str, Any]]:
    """Two runs: a tool turn with a steer riding on the results, then a follow-up run that
    ends (max_turns) while a tool call waits."""
    return [
        ev("user.message", 1, **user("My code is ALPHA-7. Add 1 and 2.")),
        ev("run.started", 2, profile="agentic", config={"profile": "agentic", "system": "be brief",
                                                          "models": ["claude-a"], "max_tokens": 500}),
        ev("message", 3, **assistant(t("Adding."), use("tu1"), use("tu2"))),
        ev("tool.call", 4, turn=1, tool_use_id="tu1", name="add", input={}),
        ev("tool.result", 5, turn=1, tool_use_id="tu2", name="add", is_error=False, content="3"),
        ev("tool.result", 6, turn=1, tool_use_id="tu1", name="add", is_error=True, content="boom"),
        ev("user.message", 7, **user([{"type": "tool_result", "tool_use_id": "tu1"},
                                      {"type": "tool_result", "tool_use_id": "tu2"}, t("hurry")], source="steer")),
        ev("message", 8, **assistant(t("It is 3."))),
        ev("run.ended", 9, status="completed", final_text="It is 3.", conclusion=None, turns=2,
           usage={"input_tokens": 20, "output_tokens": 10}, cost_usd=0.5),
        ev("error", 10, code="session_busy", message="x"),
        ev("user.message", 11, run_id="r2", **user("What was my code?", source="message")),
        ev("run.started", 12, run_id="r2", profile="agentic"),
        ev("text.delta", 13, run_id="r2", turn=1, text="ignored"),
        ev("message", 14, run_id="r2", **assistant(t("Checking."), use("tu3"))),
        ev("run.ended", 15, run_id="r2", status="max_turns", final_text="Checking.", conclusion=None, turns=1,
           usage={"input_tokens": 7, "output_tokens": 3}, cost_usd=0.25),
    ]


@pytest.mark.unit
def test_the_history_the_transcript_describes() -> None:
    rebuilt = reconstruct(SID, transcript())
    assert rebuilt is not None and rebuilt.last_seq == 15
    assert rebuilt.history == [
        {"role": "user", "content": [t("My code is ALPHA-7. Add 1 and 2.")]},
        {"role": "assistant", "content": [t("Adding."), use("tu1"), use("tu2")]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": "boom", "is_error": True},
            {"type": "tool_result", "tool_use_id": "tu2", "content": "3"},
            t("hurry")]},
        {"role": "assistant", "content": [t("It is 3.")]},
        {"role": "user", "content": [t("What was my code?")]},
        {"role": "assistant", "content": [t("Checking."), use("tu3")]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu3", "is_error": True,
                                      "content": "not executed: the run ended (max_turns)"}]},
    ]


@pytest.mark.unit
def test_the_state_is_idle_and_loads_in_the_router() -> None:
    rebuilt = reconstruct(SID, transcript())
    assert rebuilt is not None
    state = SessionState.load(rebuilt.state, SID)
    assert state.status == "idle" and state.run is None and state.history_len == 7
    assert (state.runs, state.turns) == (2, 3)
    assert state.rebuilt and state.ingress_seq == 0, "its next input reads no backlog from the ack floor"
    assert not idle_state(SID, replay(SID, transcript())).rebuilt, "a fork made from the same tally is a new session"
    assert state.usage.total_input() == 27 and state.usage.output_tokens == 13 and state.cost_usd == 0.75
    # r2 (a follow-up) ran with the settings of r1, the last run.started that carried them.
    config = state.last_config
    assert config is not None and (config.system, config.max_tokens, config.models) == ("be brief", 500, ["claude-a"])
    without = [{k: v for k, v in e.items() if k != "config"} for e in transcript()]
    rebuilt = reconstruct(SID, without)
    assert rebuilt is not None
    fallback = SessionState.load(rebuilt.state, SID).last_config
    assert fallback is not None and (fallback.profile, fallback.models, fallback.system) == \
        ("agentic", ["claude-a"], None), "without run.started.config: the profile and the last model"


@pytest.mark.unit
def test_results_the_router_made_itself_come_from_its_user_message() -> None:
    cancelled = {"type": "tool_result", "tool_use_id": "tu1", "is_error": True, "content": "Cancelled by steering"}
    events = [ev("user.message", 1, **user("go")), ev("run.started", 2, profile="agentic"),
              ev("message", 3, **assistant(use("tu1"), use("tu2"))),
              ev("tool.result", 4, tool_use_id="tu2", name="add", is_error=False, content="3"),
              ev("user.message", 5, **user([cancelled, {"type": "tool_result", "tool_use_id": "tu2"},
                                            {"type": "tool_result", "tool_use_id": "elsewhere", "content": "x"},
                                            t("stop")]))]
    rebuilt = reconstruct(SID, events)
    assert rebuilt is not None
    assert rebuilt.history[-1]["content"] == [cancelled, {"type": "tool_result", "tool_use_id": "tu2", "content": "3"},
                                              t("stop")]


@pytest.mark.unit
def test_the_router_side_of_user_message() -> None:
    message = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "big"},
                                           {"type": "tool_result", "tool_use_id": "b", "content": "cancelled"},
                                           t("steer")]}
    fields = user_message_fields(message, 3, "steer", reported={"a"})
    assert fields == {"turn": 3, "source": "steer", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "a"},
        {"type": "tool_result", "tool_use_id": "b", "content": "cancelled"}, t("steer")]}}
    assert message["content"][0]["content"] == "big", "the history's message is not changed"


@pytest.mark.unit
def test_nothing_to_rebuild() -> None:
    assert reconstruct(SID, []) is None
    assert reconstruct(SID, [ev("error", 1, code="invalid_body", message="x")]) is None
    without_input = [e for e in transcript() if e["kind"] != "user.message"]
    assert reconstruct(SID, without_input) is None, "a history without the user's side is no history"


# -- round trip through the router's own core --------------------------------------------------
class Driver:
    """Feeds the router's core, keeps its history as the Redis list would, and its events
    (plus the tools service's `tool.result` events) as the transcript would."""

    def __init__(self) -> None:
        self.state = SessionState(session_id=SID)
        self.history: list[dict[str, Any]] = []
        self.events: list[dict[str, Any]] = []
        self.inputs = 0
        self.pending: str | None = None

    def apply(self, inp: i.BaseInput) -> None:
        d = decide(self.state, inp, CoreConfig(default_model="claude-a", default_max_tokens=100))
        assert d.state is not None
        del self.history[d.history_len_before:]
        self.history.extend(d.append)
        self.state = d.state
        for effect in d.effects:
            if isinstance(effect, EmitEvent):
                self.emit(effect.kind, effect.run_id, **effect.fields)
            elif isinstance(effect, PublishWork):
                self.pending = effect.envelope["step_id"]

    def emit(self, kind: str, run_id: str | None, **fields: Any) -> None:
        self.events.append(make_event(kind, SID, run_id, seq=len(self.events) + 1, **fields))

    def ingress(self, verb: str, body: dict[str, Any]) -> None:
        self.inputs += 1
        model = {"start": StartRun, "message": FollowUp, "steer": FollowUp}[verb]
        cls = {"start": i.StartInput, "message": i.MessageInput, "steer": i.SteerInput}[verb]
        self.apply(cls(input_id=f"in:{self.inputs}", new_id=f"run{self.inputs}", body=model.model_validate(body)))

    def generation(self, *content: dict[str, Any]) -> None:
        assert self.state.run is not None and self.pending is not None
        stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
        self.apply(i.GenerationInput(input_id=self.pending, result=GenerationResult(
            session_id=SID, run_id=self.state.run.run_id, step_id=self.pending, model="claude-a",
            message={"role": "assistant", "content": list(content)}, stop_reason=stop,
            usage=Usage(input_tokens=10, output_tokens=5))))

    def tools(self, *results: tuple[str, str]) -> None:
        assert self.state.run is not None and self.pending is not None
        run_id = self.state.run.run_id
        items = [ToolResultItem(tool_use_id=tid, name="add", content=c) for tid, c in results]
        for item in items:  # the tools service's events come first
            self.emit("tool.result", run_id, turn=1, tool_use_id=item.tool_use_id, name="add",
                      is_error=False, content=item.content)
        self.apply(i.ToolsInput(input_id=self.pending, result=ToolsResult(
            session_id=SID, run_id=run_id, step_id=self.pending, results=items)))


@pytest.mark.unit
def test_a_session_driven_through_the_router_core_rebuilds_to_the_same_history() -> None:
    drv = Driver()
    drv.ingress("start", {"input": [{"role": "user", "content": "My code is ALPHA-7."},
                                    {"role": "assistant", "content": "Noted."},
                                    {"role": "user", "content": "Add 1 and 2, twice."}],
                          "system": "be brief", "limits": {"max_turns": 4}})
    assert any(e["kind"] == "user.message" for e in drv.events)
    drv.generation(t("Adding."), use("tu1"), use("tu2"))
    drv.ingress("steer", {"content": "hurry"})
    drv.tools(("tu1", "3"), ("tu2", "3"))
    drv.generation(t("Both are 3."))
    drv.ingress("message", {"content": "And my code?"})
    drv.generation(t("ALPHA-7."))
    rebuilt = reconstruct(SID, drv.events)
    assert rebuilt is not None
    assert normalise_messages(rebuilt.history) == normalise_messages(drv.history)
    state = SessionState.load(rebuilt.state, SID)
    assert state.last_config is not None and state.last_config.system == "be brief", \
        "the router puts the run's config on run.started"


@pytest.mark.unit
def test_turns_the_router_did_not_store_stay_out_of_the_rebuilt_history() -> None:
    """A vacuous answer retried and the looping turns of the loop ladder are `retracted`
    and never stored: the transcript's history leaves them out too."""
    drv = Driver()
    drv.ingress("start", {"input": "Add 1 and 2, please."})
    drv.generation(t("."))  # vacuous: retried
    for n in range(1, 4):  # the same call three times: the third is redirected, not stored
        drv.generation(t("Adding."), use(f"tu{n}"))
        if n < 3:
            drv.tools((f"tu{n}", "3"))
    drv.ingress("steer", {"content": "stop adding"})  # a steer's retraction names no stored turn
    drv.generation(t("It is 3."))
    assert [e["reason"] for e in drv.events if e["kind"] == "retracted"][:2] == [
        "vacuous answer (punctuation_only): retried", "loop detected (repeated_tool_call): redirect"]
    rebuilt = reconstruct(SID, drv.events)
    assert rebuilt is not None
    assert normalise_messages(rebuilt.history) == normalise_messages(drv.history)
    assert "tu3" not in str(rebuilt.history) and "'.'" not in str(rebuilt.history)
