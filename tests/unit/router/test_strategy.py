"""Strategy configs keyed by (actor, expectation): sources, resolution, and what a run gets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.finish import GUIDELINE
from loopwire.router.core.strategy import StrategyConfig, index, resolve
from loopwire.router.shell.strategy_store import load_file
from loopwire.shared.contract.protocol import StartRun
from tests.router_driver import Driver

ENTRIES = [
    {"actor": "ops", "expectation": "triage", "role": "You triage incidents.", "tools": ["logs"]},
    {"actor": "ops", "expectation": "report", "role": "You write reports.", "tools": ["docs"]},
    {"actor": "ops", "role": "You are the ops agent.", "guidelines": ["Be brief."]},
    {"actor": "solo", "expectation": "only", "role": "Solo, only."},
]


def table(entries: list[dict[str, Any]] = ENTRIES) -> dict:
    return index([StrategyConfig.model_validate(e) for e in entries], {})


@pytest.mark.unit
@pytest.mark.parametrize(("actor", "expectation", "role"), [
    ("ops", "triage", "You triage incidents."),
    ("ops", "report", "You write reports."),
    ("ops", None, "You are the ops agent."),
    ("ops", "unknown", "You are the ops agent."),  # the actor's default, never another expectation's
    ("solo", "only", "Solo, only."),
    ("solo", None, None),  # no default for solo: the profile's defaults, never "only"'s config
    ("solo", "other", None),
    ("nobody", "triage", None),
    (None, "triage", None),
])
def test_resolution_is_exact_then_by_actor_default_then_none(actor: str | None, expectation: str | None,
                                                             role: str | None) -> None:
    found = resolve(table(), actor, expectation)
    assert (found.role if found else None) == role


@pytest.mark.unit
def test_resolution_does_not_depend_on_the_order_of_entries() -> None:
    for entries in (ENTRIES, list(reversed(ENTRIES))):
        t = table(entries)
        assert resolve(t, "ops", "report").role == "You write reports."
        assert resolve(t, "ops", "triage").role == "You triage incidents."


@pytest.mark.unit
def test_files_in_json_and_yaml_and_duplicates_rejected(tmp_path: Path) -> None:
    js = tmp_path / "s.json"
    js.write_text(json.dumps({"strategies": ENTRIES}))
    ym = tmp_path / "s.yaml"
    ym.write_text("- actor: ops\n  expectation: triage\n  role: From YAML.\n  limits: {max_turns: 4}\n")
    assert len(load_file(js)) == 4
    (entry,) = load_file(ym)
    assert entry.role == "From YAML." and entry.limits.max_turns == 4
    dup = tmp_path / "dup.json"
    dup.write_text(json.dumps([ENTRIES[0], ENTRIES[0]]))
    with pytest.raises(ValueError, match="two strategy configs"):
        load_file(dup)


@pytest.mark.unit
def test_the_file_wins_and_redis_is_the_fallback() -> None:
    file_entries = [StrategyConfig.model_validate(e) for e in ENTRIES]
    redis = {"b": json.dumps({"actor": "ops", "expectation": "triage", "role": "From Redis."}),
             "a": "{not json", "c": json.dumps({"actor": "ops", "expectation": "new", "role": "Run time."}),
             "d": json.dumps({"actor": "ops", "expectation": "new", "role": "Shadowed."})}
    t = index(file_entries, redis)
    assert resolve(t, "ops", "triage").role == "You triage incidents.", "a pair the file defines is the file's"
    assert resolve(t, "ops", "new").role == "Run time.", "a pair only Redis defines: its first field"
    assert resolve(index([], redis), "ops", "triage").role == "From Redis."


@pytest.mark.unit
def test_a_strategy_shapes_the_run_and_the_run_wins() -> None:
    config = StrategyConfig(actor="ops", expectation="triage", role="You triage.", objective="Find the cause.",
                            guidelines=["Read logs first."], tools=["logs", "rm"],
                            tool_permissions={"rm": "approve", "logs": "auto"}, limits={"max_turns": 5,
                                                                                         "max_total_tokens": 9000})
    d = Driver()
    d.apply(i.StartInput(input_id="in:1", new_id="run1", strategy=config.model_dump(mode="json"), body=StartRun(
        input="disk full", system="Answer in French.", tool_permissions={"logs": "deny"},
        limits={"max_total_tokens": 1000}, strategy={"actor": "ops", "expectation": "triage"})))
    cfg = d.run.config
    assert cfg.system == ("You triage.\n\nObjective: Find the cause.\n\nGuidelines:\n- Read logs first.\n"
                          f"- {GUIDELINE}\n\nAnswer in French."), "the finish tool's guideline: it is offered"
    assert cfg.tools == ["logs", "rm"]
    assert cfg.tool_permissions == {"rm": "approve", "logs": "deny"}
    assert (cfg.max_turns, cfg.max_total_tokens) == (5, 1000)
    assert (cfg.strategy, cfg.actor, cfg.expectation) == ("ops/triage", "ops", "triage")
    assert d.work()["system"] == cfg.system


