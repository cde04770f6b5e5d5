"""Per-session ingress order in the router's core: the session's position in the ingress
stream, what an input found at or below it does, refusals that still move it, and the
work in flight kept in the outbox (services/router/shell/ingress_order.py, core/decide.py)."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig, decide
from loopwire.router.core.effects import PublishWork, effect_from_dict
from loopwire.shared.contract.protocol import Abort, FollowUp, StartRun
from loopwire.shared.contract.session_state import SessionState
from tests.router_driver import PRICES

pytestmark = pytest.mark.unit

CFG = CoreConfig(prices=PRICES, default_model="m1", default_max_tokens=1000)


def start(seq: int, backlog: bool = False, **body: Any) -> i.StartInput:
    body.setdefault("input", "hello")
    return i.StartInput(input_id=f"in:{seq}", ingress_seq=seq, backlog=backlog, new_id=f"run{seq}",
                        body=StartRun.model_validate(body))


def message(seq: int, content: str, backlog: bool = False) -> i.MessageInput:
    return i.MessageInput(input_id=f"in:{seq}", ingress_seq=seq, backlog=backlog, new_id=f"r{seq}",
                          body=FollowUp(content=content))


def work_of(outbox: list[dict[str, Any]]) -> list[str]:
    return [effect.msg_id for effect in map(effect_from_dict, outbox) if isinstance(effect, PublishWork)]


def test_an_applied_input_records_its_stream_position() -> None:
    d = decide(SessionState(session_id="s1"), start(7), CFG)
    assert d.state is not None and d.state.ingress_seq == 7
    d2 = decide(d.state, message(9, "more"), CFG)
    assert d2.state is not None and d2.state.ingress_seq == 9


def test_an_input_at_or_below_the_position_is_never_applied_again() -> None:
    st = decide(SessionState(session_id="s1"), start(3), CFG).state
    assert st is not None
    st = decide(st, message(5, "later"), CFG).state
    assert st is not None and st.ingress_seq == 5
    # Read from the stream by a replica applying a later input: nothing at all.
    found = decide(st, start(3, backlog=True), CFG)
    assert found.state is None and not found.effects and not found.replay
    # Delivered (again) to this replica: the session's current outbox is performed again,
    # never the input itself (it would start a second run).
    again = decide(st, start(3), CFG)
    assert again.state is None and again.replay
    assert [e.model_dump(mode="json") for e in again.effects] == st.outbox
    # That outbox is the later input's, whose replica publishes its events: only events
    # not stored yet go out from here (a second copy would repeat seqs to subscribers).
    assert again.outbox_of_later_input
    # The latest input delivered again replays its own outbox, events and all.
    own = decide(st, message(5, "later"), CFG)
    assert own.replay and not own.outbox_of_later_input


def test_a_refusal_on_an_existing_session_moves_its_position() -> None:
    st = decide(SessionState(session_id="s1"), start(1), CFG).state
    assert st is not None and st.status == "running"
    busy = decide(st, start(2), CFG)  # a second start while the run runs: session_busy
    assert busy.state is not None, "the refusal is committed: decided once, never again"
    assert busy.state.ingress_seq == 2 and busy.state.status == "running"
    assert busy.state.run == st.run and busy.state.history_len == st.history_len
    (error,) = [e for e in busy.effects if getattr(e, "kind", None) == "error"]
    assert error.fields["code"] == "session_busy"
    assert busy.state.outbox_input == "in:2"


def test_a_refusal_on_a_session_that_does_not_exist_stores_nothing() -> None:
    d = decide(SessionState(session_id="s1"), i.AbortInput(input_id="in:4", ingress_seq=4, body=Abort()), CFG)
    assert d.state is None and [e.kind for e in d.effects] == ["error"]  # type: ignore[union-attr]


def test_a_queued_follow_up_keeps_the_work_in_flight_in_the_outbox() -> None:
    st = decide(SessionState(session_id="s1"), start(1), CFG).state
    assert st is not None
    assert st.run is not None
    in_flight = work_of(st.outbox)
    assert in_flight == [f"{st.run.pending_step}:assemble"]
    d = decide(st, message(2, "and then?"), CFG)
    assert d.state is not None and d.state.queued
    assert not [e for e in d.effects if isinstance(e, PublishWork)], "nothing is sent again now"
    assert work_of(d.state.outbox) == in_flight, "but a replay of this outbox sends the step's work"
    d3 = decide(d.state, message(3, "and?"), CFG)
    assert d3.state is not None and work_of(d3.state.outbox) == in_flight
