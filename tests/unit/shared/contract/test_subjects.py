"""Session ids and subjects with and without tenants (LOOPWIRE_TENANTS)."""

from __future__ import annotations

import pytest

from loopwire.shared.contract import keys
from loopwire.shared.contract.subjects import Subjects, tenant_of, valid_session_id

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("sid", "plain", "tenanted"), [
    ("s1", True, False),
    ("acme.s1", False, True),
    ("acme.s1.x", False, False),
    (".s1", False, False),
    ("acme.", False, False),
    ("acme.s*", False, False),
    ("a" * 128 + ".s1", False, True),
])
def test_valid_session_ids(sid: str, plain: bool, tenanted: bool) -> None:
    assert valid_session_id(sid) is plain
    assert valid_session_id(sid, tenants=True) is tenanted


def test_the_tenant_is_a_subject_token_of_its_own() -> None:
    subjects = Subjects("loopwire", tenants=True)
    assert subjects.ingress("acme.s1", "start") == "loopwire.in.acme.s1.start"
    assert subjects.parse_ingress("loopwire.in.acme.s1.start") == ("acme.s1", "start")
    assert subjects.event("acme.s1", "run.ended") == "loopwire.out.acme.s1.run.ended"
    assert subjects.cancel("acme.s1") == "loopwire.ctl.acme.s1.cancel"
    assert subjects.cancel_all == "loopwire.ctl.*.*.cancel"
    assert Subjects("loopwire").cancel_all == "loopwire.ctl.*.cancel"
    assert subjects.query("session.get", "acme") == "loopwire.api.acme.session.get"
    assert subjects.query("sessions.list") == "loopwire.api.sessions.list"
    assert subjects.tenant_of_query("loopwire.api.acme.transcript.get") == "acme"
    assert subjects.tenant_of_query("loopwire.out.acme.x") is None
    assert tenant_of("acme.s1") == "acme" and tenant_of("s1") is None
    assert keys.sessions_index("acme.s1") == keys.SESSIONS_INDEX + ":acme" and keys.sessions_index("s1") == keys.SESSIONS_INDEX
