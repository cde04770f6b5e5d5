"""Drives one session through the router's pure core, the way the shell would: each input
is decided on the current state, the state and history are "committed", and the effects
are kept for assertions. No I/O. `Recorder` keeps the transcript as well (forks, replays,
the bench's fork of a long session)."""

from __future__ import annotations

from typing import Any

from loopwire.memory.assembly import normalise_messages
from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig, Decision, decide
from loopwire.router.core.effects import EmitEvent, PublishNotice, PublishWork
from loopwire.shared.contract.envelopes import GenerationResult, StepError, ToolResultItem, ToolsResult, Usage
from loopwire.shared.contract.protocol import Abort, ApprovalDecision, FollowUp, StartRun, make_event
from loopwire.shared.contract.run_state import RunState
from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.runtime.pricing import price_table

PRICES = price_table({"m1": {"input": 0, "output": 0}, "m2": {"input": 0, "output": 0}})
"""The built-in prices, and the unit tests' placeholder models at no cost, as an operator
would price a model of their own with LOOPWIRE_PRICES (an unpriced model is tested on
its own, tests/test_pricing.py)."""
CFG = CoreConfig(default_model="m1", default_max_tokens=1000, prices=PRICES)


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def call(tid: str, name: str = "add", inp: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "tool_use", "id": tid, "name": name, "input": inp if inp is not None else {"a": 1, "b": 2}}


class Driver:
    def __init__(self, cfg: CoreConfig = CFG, sid: str = "s1") -> None:
        self.cfg = cfg
        self.state = SessionState(session_id=sid)
        self.history: list[dict[str, Any]] = []
        self.decisions: list[Decision] = []
        self._seq = 0
        self._ids = 0
        self.tenant_today: tuple[int, float] | None = None
        """The tenant's usage today the shell would look up, passed with every input."""

    # -- inputs ---------------------------------------------------------------------------------
    def apply(self, inp: i.BaseInput) -> Decision:
        if self.tenant_today is not None:
            inp.tenant_today = self.tenant_today
        before = self.state.dump_json()
        d = decide(self.state, inp, self.cfg)
        # The shell keeps committed states and hands them in again: the core copies, never changes them.
        assert self.state.dump_json() == before, "decide changed the state it was given"
        if d.state is not None:
            self.state = d.state
            self.history = self.history[: d.history_len_before] + list(d.append)
        self.decisions.append(d)
        return d

    def _in(self) -> str:
        self._seq += 1
        return f"in:{self._seq}"

    def start(self, run_id: str = "run1", **body: Any) -> Decision:
        body.setdefault("input", "please help")
        return self.apply(i.StartInput(input_id=self._in(), new_id=run_id, body=StartRun.model_validate(body)))

    def answer(self, *content: dict[str, Any] | str, stop: str | None = None, usage: tuple[int, int] = (10, 5),
               model: str | None = None, usage_obj: Usage | None = None,
               schemas: dict[str, dict[str, Any]] | None = None) -> Decision:
        blocks = [text(c) if isinstance(c, str) else c for c in content]
        if stop is None:
            stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        step_id = self.pending
        return self.apply(i.GenerationInput(input_id=step_id, result=GenerationResult(
            session_id=self.state.session_id, run_id=self.run.run_id, step_id=step_id,
            message={"role": "assistant", "content": blocks}, stop_reason=stop,
            model=model or self.work()["models"][0],
            usage=usage_obj or Usage(input_tokens=usage[0], output_tokens=usage[1])), tool_schemas=schemas))

    def fail(self, code: str, message: str = "it failed", retryable: bool = False) -> Decision:
        step_id = self.pending
        return self.apply(i.GenerationInput(input_id=step_id, result=GenerationResult(
            session_id=self.state.session_id, run_id=self.run.run_id, step_id=step_id, ok=False,
            error=StepError(code=code, message=message, retryable=retryable))))

    def tools(self, content: str = "3", is_error: bool = False) -> Decision:
        run = self.run
        return self.apply(i.ToolsInput(input_id=self.pending, result=ToolsResult(
            session_id=self.state.session_id, run_id=run.run_id, step_id=self.pending,
            results=[ToolResultItem(tool_use_id=c["id"], name=c["name"], content=content, is_error=is_error)
                     for c in run.tools.pending_calls])))

    def message(self, content: str) -> Decision:
        return self.apply(i.MessageInput(input_id=self._in(), new_id="follow", body=FollowUp(content=content)))

    def steer(self, content: str) -> Decision:
        return self.apply(i.SteerInput(input_id=self._in(), new_id="steered", body=FollowUp(content=content)))

    def decision(self, checkpoint_id: str, decision: str = "approve", note: str | None = None) -> Decision:
        return self.apply(i.DecisionInput(input_id=self._in(), body=ApprovalDecision(
            checkpoint_id=checkpoint_id, decision=decision, note=note)))

    def abort(self, reason: str = "stop") -> Decision:
        return self.apply(i.AbortInput(input_id=self._in(), body=Abort(reason=reason)))

    def admit(self, verdict: str = "granted", position: int = 0, run_id: str | None = None) -> Decision:
        """The tenant's answer for the waiting run (or `run_id`), as the shell hands it in."""
        run_id = run_id or (self.state.waiting.run_id if self.state.waiting else "")
        return self.apply(i.AdmissionInput(input_id=f"admit:{run_id}:{verdict}", run_id=run_id,
                                           verdict=verdict, position=position))  # type: ignore[arg-type]

    # -- views ------------------------------------------------------------------------------------
    @property
    def run(self) -> RunState:
        assert self.state.run is not None, "no active run"
        return self.state.run

    @property
    def pending(self) -> str:
        assert self.run.pending_step is not None
        return self.run.pending_step

    def work(self, d: Decision | None = None) -> dict[str, Any]:
        """The envelope of the latest work published (by `d`, or by any decision so far)."""
        for decision in [d] if d is not None else reversed(self.decisions):
            works = [e for e in decision.effects if isinstance(e, PublishWork)]
            if works:
                return works[-1].envelope
        raise AssertionError("no work published")

    @property
    def events(self) -> list[EmitEvent]:
        return [e for d in self.decisions for e in d.effects if isinstance(e, EmitEvent)]

    def kinds(self, d: Decision | None = None) -> list[str]:
        source = self.events if d is None else [e for e in d.effects if isinstance(e, EmitEvent)]
        return [e.kind for e in source]

    def of(self, kind: str, d: Decision | None = None) -> list[dict[str, Any]]:
        source = self.events if d is None else [e for e in d.effects if isinstance(e, EmitEvent)]
        return [e.fields for e in source if e.kind == kind]

    def ended(self) -> dict[str, Any]:
        (fields,) = self.of("run.ended")
        return fields

    @staticmethod
    def notices(d: Decision) -> list[PublishNotice]:
        return [e for e in d.effects if isinstance(e, PublishNotice)]


class Recorder(Driver):
    """The router's core driven through a session, with its transcript (the router's
    events, and the tools service's `tool.result` events of a batch before its result)
    and the history it held after each transition."""

    def __init__(self, sid: str = "src") -> None:
        super().__init__(sid=sid)
        self.transcript: list[dict[str, Any]] = []
        self.histories: list[list[dict[str, Any]]] = [[]]

    def apply(self, inp: i.BaseInput) -> Any:
        d = super().apply(inp)
        for effect in d.effects:
            if isinstance(effect, EmitEvent):
                self.emit(effect.kind, effect.run_id, **effect.fields)
        self.histories.append(normalise_messages(self.history))
        return d

    def emit(self, kind: str, run_id: str | None, **fields: Any) -> None:
        self.transcript.append(make_event(kind, self.state.session_id, run_id, seq=len(self.transcript) + 1, **fields))

    def tools(self, content: str = "3", is_error: bool = False) -> Any:
        for c in self.run.tools.pending_calls:  # the tools service emits a batch's results itself
            self.emit("tool.result", self.run.run_id, turn=self.run.turn, tool_use_id=c["id"], name=c["name"],
                      is_error=is_error, content=content)
        return super().tools(content, is_error)
