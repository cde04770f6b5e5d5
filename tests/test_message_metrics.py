"""Message-level metrics never carry a session id in a label."""

from __future__ import annotations

import pytest

from loopwire.shared.message_metrics import subject_pattern

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("subject", "pattern"), [
    ("loopwire.in.s-123.start", "loopwire.in.*.start"),
    ("pfx.out.abc.text.delta", "pfx.out.*.text.delta"),
    ("loopwire.ctl.abc.cancel", "loopwire.ctl.*.cancel"),
    ("loopwire.work.llm.generate", "loopwire.work.llm.generate"),
    ("loopwire.api.session.get", "loopwire.api.session.get"),
])
def test_subject_pattern(subject: str, pattern: str) -> None:
    assert subject_pattern(subject) == pattern
