"""The streams' configuration comes from the settings, an equal stream is left alone, and
what a forming cluster gets over by itself is retried (shared/runtime/streams.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from nats import errors as nats_errors
from nats.js.errors import BadRequestError, ServerError, ServiceUnavailableError

from loopwire.settings import Settings
from loopwire.shared.contract.subjects import EVENTS_STREAM, INGRESS_STREAM, WORK_STREAM
from loopwire.shared.runtime.credentials import split_servers
from loopwire.shared.runtime.streams import config_differences, is_transient, stream_configs

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


@pytest.mark.unit
def test_a_stream_equal_to_its_config_is_not_updated() -> None:
    wanted = next(c for c in stream_configs(Settings(stream_replicas=3)) if c.name == WORK_STREAM)
    # As the server reports it back: no limit as 0, the subjects in its own order.
    current = replace(wanted, max_age=wanted.max_age or 0.0, subjects=list(reversed(wanted.subjects or [])),
                      description="set by an operator")
    assert config_differences(wanted, current) == []
    assert config_differences(wanted, replace(current, num_replicas=1)) == ["num_replicas"]
    assert config_differences(wanted, replace(current, duplicate_window=60.0)) == ["duplicate_window"]


@pytest.mark.unit
def test_what_a_cluster_gets_over_by_itself_is_retried() -> None:
    assert is_transient(nats_errors.TimeoutError()) and is_transient(nats_errors.NoRespondersError())
    assert is_transient(ServiceUnavailableError(code=503, err_code=10008, description="temporarily unavailable"))
    assert is_transient(BadRequestError(code=400, err_code=10005, description="no suitable peers for placement"))
    assert not is_transient(ServerError(code=500, err_code=10074, description="replicas > 1 not supported"))
    assert not is_transient(BadRequestError(code=400, err_code=10058, description="stream name already in use"))


@pytest.mark.unit
def test_a_cluster_url_is_split_for_nats_py() -> None:
    assert split_servers("nats://a:4222, nats://b:4222,,nats://c:4222") == [
        "nats://a:4222", "nats://b:4222", "nats://c:4222"]
    assert split_servers("nats://one:4222") == ["nats://one:4222"]
