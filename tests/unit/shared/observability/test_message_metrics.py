"""The subjects FastStream's message metrics are labelled with (observability/message_metrics.py)."""

from __future__ import annotations

import pytest

from loopwire.shared.observability.message_metrics import subject_pattern


@pytest.mark.parametrize(("subject", "pattern"), [
    ("loopwire.in.s-123.start", "loopwire.in.*.start"),
    ("pfx.out.abc.text.delta", "pfx.out.*.text.delta"),
    ("loopwire.ctl.abc.cancel", "loopwire.ctl.*.cancel"),
    ("loopwire.work.llm.generate", "loopwire.work.llm.generate"),
    ("loopwire.api.session.get", "loopwire.api.session.get"),
])
@pytest.mark.unit
def test_subject_pattern(subject: str, pattern: str) -> None:
    assert subject_pattern(subject) == pattern
