"""The approvals-pending gauge follows sessions into and out of `awaiting_approval`."""

from __future__ import annotations

import pytest

from loopwire.router.core.decide import Decision
from loopwire.router.shell.decision_telemetry import count_approvals
from loopwire.shared.contract.session_state import SessionState
from loopwire.shared.observability import metrics

pytestmark = pytest.mark.unit


def gauge() -> float:
    return metrics.APPROVALS_PENDING._value.get()


def test_gauge_moves_on_entering_and_leaving_awaiting_approval() -> None:
    idle = SessionState(session_id="s", status="running")
    waiting = SessionState(session_id="s", status="awaiting_approval")
    start = gauge()
    count_approvals(idle, Decision(state=waiting))
    assert gauge() == start + 1
    count_approvals(waiting, Decision(state=waiting))
    assert gauge() == start + 1, "still waiting: no change"
    count_approvals(waiting, Decision(state=None, replay=True))
    assert gauge() == start + 1, "a replayed outbox changes nothing"
    count_approvals(waiting, Decision(state=idle))
    assert gauge() == start
