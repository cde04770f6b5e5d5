"""shared/contract/codec.py: the event timestamp."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

from loopwire.shared.contract.codec import now_rfc3339


def test_now_is_rfc3339_utc_to_the_millisecond_and_moves_on() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    first = now_rfc3339()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", first)
    stamp = datetime.fromisoformat(first.replace("Z", "+00:00"))
    assert before <= stamp <= datetime.now(UTC)
    time.sleep(0.002)
    assert now_rfc3339() > first  # the kept text is for its own millisecond only
