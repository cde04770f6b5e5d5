"""shared/contract/keys.py owns every Redis key name, and message_ids.py every step-derived
message id and event key: each key of one session falls in that session's hash slot, and no
other module spells a key or a step's suffix itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from redis.crc import key_slot

from loopwire.shared.contract import keys, message_ids

ROOT = Path(__file__).resolve().parents[4]
SOURCES = ("services", "shared", "loopwire")
KEYS_MODULE = ROOT / "shared" / "contract" / "keys.py"
IDS_MODULE = ROOT / "shared" / "contract" / "message_ids.py"
STEP_SUFFIXES = (":result", ":assemble", ":execute", ":generate", ":compaction", ":retract:", ":fallback:", ":ask:",
                 ":plan:", ":message:", ":x")
KEY_TEXT = re.compile(rf"(?<![\w.]){keys.PREFIX}:[\w{{<*]")
"""A key's beginning (`lw:s:`, `lw:{`), not `as lw:` in a docstring's example."""


def session_keys(sid: str) -> list[str]:
    step = message_ids.generation_step_id("run-1", 3)
    names = [keys.generation_step(sid, step), keys.tool_call_step(sid, "toolu_1"),
             keys.tool_batch_step(sid, message_ids.tools_step_id("run-1", 2))]
    return [keys.session_state(sid), keys.session_history(sid), keys.event_seq(sid), keys.event_dedup(sid),
            keys.event_stream(sid), keys.memory(sid, "usage"), keys.memory(sid, "compaction"),
            keys.memory_lock(sid, "observe"), keys.memory_step_usage(sid, step), keys.executor_session(sid),
            keys.session_forks(sid),
            *(make(name) for name in names for make in (keys.step_record, keys.step_claim, keys.step_fence))]


@pytest.mark.parametrize("sid", ["s1", "acme.s1", "A-b_9", "x" * 128])
def test_every_key_of_a_session_is_in_its_slot(sid: str) -> None:
    names = session_keys(sid)
    assert len(set(names)) == len(names), "two kinds share a key"
    assert {key_slot(name.encode()) for name in names} == {key_slot(sid.encode())}
    assert all(name.startswith(keys.PREFIX + ":") for name in names)


def test_sessions_spread_over_slots_and_keys_that_span_them_have_no_session_tag() -> None:
    slots = {key_slot(keys.session_state(f"s{n}").encode()) for n in range(200)}
    assert len(slots) > 190
    spanning = [keys.sessions_index("s1"), keys.sessions_index("acme.s1"), keys.RUNNING, keys.TOOL_CATALOG,
                keys.STRATEGIES, keys.breaker("m"), keys.blob("ab" * 32), keys.token_count("cd" * 32),
                keys.actor_memory("ops", "obs")]
    assert not any("{" in name for name in spanning)
    assert keys.sessions_index("acme.s1") != keys.sessions_index("s1") == keys.SESSIONS_INDEX


@pytest.mark.parametrize("tenant", ["acme", "*", "x" * 128])
def test_every_key_of_a_tenant_is_in_its_slot_and_none_in_a_sessions(tenant: str) -> None:
    names = [keys.tenant_slots(tenant), keys.tenant_queue(tenant), keys.tenant_waiting(tenant),
             keys.tenant_arrivals(tenant), keys.tenant_day(tenant, "2026-12-02"), keys.tenant_run_counted(tenant, "r1")]
    assert len(set(names)) == len(names)
    assert {key_slot(name.encode()) for name in names} == {key_slot(f"t:{tenant}".encode())}
    assert key_slot(keys.tenant_slots("acme").encode()) != key_slot(keys.session_state("acme.s1").encode())


def _string_parts(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string constant of a module, f-strings' literal parts included."""
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def test_no_module_but_keys_spells_a_redis_key_and_none_but_message_ids_a_step_suffix() -> None:
    found = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for line, text in _string_parts(ast.parse(path.read_text(), str(path))):
                if (path != KEYS_MODULE and KEY_TEXT.search(text)) or (
                        path != IDS_MODULE and any(text.startswith(s) for s in STEP_SUFFIXES)):
                    found.append(f"{path.relative_to(ROOT)}:{line}: {text[:60]!r}")
    assert not found, "build these with shared/contract/keys.py or message_ids.py:\n" + "\n".join(found)


def test_the_check_sees_a_key_in_an_f_string() -> None:
    tree = ast.parse('sid = "s"\nkey = f"lw:s:{sid}"\nmsg = f"{sid}:result"')
    texts = [text for _, text in _string_parts(tree)]
    assert "lw:s:" in texts and ":result" in texts
    assert KEY_TEXT.search("lw:s:") and not KEY_TEXT.search("async with client() as lw:\n")
