"""LOOPWIRE_MODEL_LIMITS' table: which entry a model counts against, and what the
operator may not write."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loopwire.settings import Settings
from loopwire.shared.contract.model_limits import ModelLimit, ModelLimits

pytestmark = pytest.mark.unit


def test_a_model_counts_against_its_own_entry_else_its_longest_prefix() -> None:
    table = ModelLimits.parse({"*": ModelLimit(rpm=100), "claude-*": ModelLimit(rpm=50),
                               "claude-opus-*": ModelLimit(max_concurrent=2), "claude-haiku-4-5": ModelLimit(rpm=5)})
    assert table.key_for("claude-opus-4-1") == "claude-opus-*"
    assert table.key_for("claude-sonnet-4-5") == "claude-*"
    assert table.key_for("claude-haiku-4-5") == "claude-haiku-4-5"
    assert table.key_for("gpt-5") == "*"
    assert ModelLimits.parse({"claude-*": ModelLimit()}).key_for("gpt-5") is None


def test_the_operator_setting_is_checked_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWIRE_MODEL_LIMITS", '{"claude-*": {"rpm": 12, "max_concurrent": 2}}')
    assert Settings().model_limits_table().for_model("claude-x") == ("claude-*", ModelLimit(rpm=12, max_concurrent=2))
    for bad in ('{"claude-*": {"max_concurent": 2}}', '{"cl*ude": {"rpm": 1}}', '{"x": {"rpm": 0}}'):
        monkeypatch.setenv("LOOPWIRE_MODEL_LIMITS", bad)
        with pytest.raises(ValidationError):
            Settings()
    monkeypatch.delenv("LOOPWIRE_MODEL_LIMITS")
    assert Settings().model_limits_table().entries == {}
