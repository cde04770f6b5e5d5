"""The streams' retention comes from the settings (shared/runtime/streams.py)."""

from __future__ import annotations

import pytest

from loopwire.shared.contract.subjects import EVENTS_STREAM, INGRESS_STREAM, WORK_STREAM
from loopwire.shared.runtime.settings import Settings
from loopwire.shared.runtime.streams import stream_configs

DAY = 24 * 3600


@pytest.mark.unit
def test_stream_ages_come_from_the_settings() -> None:
    by_name = {c.name: c for c in stream_configs(Settings())}
    assert by_name[INGRESS_STREAM].max_age == DAY
    assert by_name[WORK_STREAM].max_age == 7 * DAY
    assert by_name[EVENTS_STREAM].max_age is None, "the transcript stream keeps everything by default"
    custom = {c.name: c for c in stream_configs(Settings(ingress_max_age_s=3600, work_max_age_s=0,
                                                         events_max_age_s=30 * DAY))}
    assert custom[INGRESS_STREAM].max_age == 3600 and custom[WORK_STREAM].max_age is None
    assert custom[EVENTS_STREAM].max_age == 30 * DAY
