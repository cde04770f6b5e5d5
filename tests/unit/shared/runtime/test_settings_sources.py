"""Settings that used to be read from the environment directly now go through the
settings class (and so the README table): LOOPWIRE_DATA_DIR, LOOPWIRE_PRICES,
LOOPWIRE_OTEL_CAPTURE_CONTENT. Also: the CLI's `--profile` help names every profile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

import pytest
from typer.testing import CliRunner

from loopwire.cli import app
from loopwire.settings import Settings, get_settings
from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.protocol import Profile
from loopwire.shared.observability import tracing
from loopwire.shared.observability.tracing import spans as tracing_spans
from loopwire.shared.runtime import pricing


@pytest.fixture
def fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.unit
def test_prices_come_from_the_settings(monkeypatch: pytest.MonkeyPatch, fresh_settings: None) -> None:
    monkeypatch.setenv("LOOPWIRE_PRICES", '{"my-model": {"input": 2.0, "output": 10.0}}')
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000)
    assert pricing.cost_usd("my-model-2026", usage, pricing.price_table(get_settings().prices)) == pytest.approx(2.0 + 1.0)
    assert pricing.price_for("claude-sonnet-4-5") == pricing.DEFAULT_PRICES["claude-sonnet-4"]


@pytest.mark.unit
def test_malformed_prices_are_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWIRE_PRICES", "{not json")
    with pytest.raises(ValueError, match="prices"):  # pydantic-settings names the field
        Settings()


@pytest.mark.unit
def test_capture_content_follows_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing_spans, "_capture_content", False)
    monkeypatch.setenv("LOOPWIRE_OTEL_CAPTURE_CONTENT", "true")
    settings = Settings()
    assert settings.otel_capture_content is True
    tracing.set_capture_content(settings.otel_capture_content)  # what the launcher does
    assert tracing.capture_content() is True
    monkeypatch.delenv("LOOPWIRE_OTEL_CAPTURE_CONTENT")
    assert Settings().otel_capture_content is False


@pytest.mark.unit
def test_profile_help_lists_every_profile() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    line = next(line for line in result.output.splitlines() if "--profile" in line)
    for name in get_args(Profile):
        assert name in line, (name, line)


