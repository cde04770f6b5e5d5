"""Retention: every per-session Redis key expires with `session_ttl_s` (except the seq
counter, which must outlive its events so a seq is never reused), recorded steps with
`step_result_ttl_s`, and the three streams keep messages for their configured ages."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.memory.compaction import CompactionRecord
from loopwire.memory.store import MemoryStore
from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.stores.event_log import RedisEventLog
from loopwire.shared.stores.session_store import RedisSessionStore
from loopwire.shared.stores.step_store import RedisStepStore

DAY = 24 * 3600


@pytest.mark.integration
async def test_every_session_key_expires_with_the_session(redis_client: Any) -> None:
    ttl = 600
    sessions = RedisSessionStore(redis_client, ttl)
    events = RedisEventLog(redis_client, ttl)
    steps = RedisStepStore(redis_client, 3 * ttl)
    memory = MemoryStore(redis_client, ttl_s=ttl, claim_ttl_s=3 * ttl)
    assert await sessions.commit("s1", 0, {"x": 1}, history_len_before=0, append=[{"role": "user", "content": "hi"}])
    await events.append("s1", {"kind": "run.started"}, key="k1")
    await steps.put(keys.generation_step("s1", "r:g1"), {"ok": True})
    record = CompactionRecord(covers=3, summary="s", fingerprint="f", step_id="r:g1", usage=Usage(input_tokens=5))
    await memory.save_compaction("s1", record)
    await memory.add_observation("s1", {"text": "o"}, "actor-1", usage=Usage(output_tokens=2), observed_to=4)
    await memory.add_reflection("s1", {"text": "r"}, "actor-1", usage=Usage(), reflected=1)
    assert await memory.claim_usage("s1", "r:g1") == Usage(input_tokens=5, output_tokens=2)

    left = {k.decode(): await redis_client.ttl(k) async for k in redis_client.scan_iter("*")}
    forever = {k for k, t in left.items() if t == -1}
    assert forever == {keys.event_seq("s1")}, "only the seq counter outlives the session"
    assert left[keys.step_record(keys.generation_step("s1", "r:g1"))] > ttl
    assert left[keys.memory_step_usage("s1", "r:g1")] > ttl
    session_keys = [keys.session_state("s1"), keys.session_history("s1"), keys.sessions_index("s1"),
                    keys.event_stream("s1"), keys.event_dedup("s1"),
                    *(keys.memory("s1", what) for what in ("compaction", "obs", "refl", "meta")),
                    keys.actor_memory("actor-1", "obs"), keys.actor_memory("actor-1", "refl")]
    assert all(0 < left[k] <= ttl for k in session_keys)


@pytest.mark.integration
async def test_a_claim_is_made_once_per_step(redis_client: Any) -> None:
    memory = MemoryStore(redis_client)
    assert await memory.claim_usage("s1", "r:g1") is None
    await memory.add_usage("s1", Usage(input_tokens=7))
    assert await memory.claim_usage("s1", "r:g1") is None, "g1 claimed (nothing) already: a redelivery agrees"
    assert await memory.claim_usage("s1", "r:g2") == Usage(input_tokens=7)
    assert await memory.claim_usage("s1", "r:g2") == Usage(input_tokens=7)
    assert await memory.claim_usage("s1", "r:g3") is None
