"""Retention: every per-session Redis key expires with `session_ttl_s` (except the seq
counter, which must outlive its events so a seq is never reused), recorded steps with
`step_result_ttl_s`, and the three streams keep messages for their configured ages."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.memory.compaction import CompactionRecord
from loopwire.memory.store import MemoryStore
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
    assert await sessions.commit("s1", 0, {"x": 1}, 0, [{"role": "user", "content": "hi"}])
    await events.append("s1", {"kind": "run.started"}, key="k1")
    await steps.put("gen:s1:g1", {"ok": True})
    record = CompactionRecord(covers=3, summary="s", fingerprint="f", step_id="r:g1", usage=Usage(input_tokens=5))
    await memory.save_compaction("s1", record)
    await memory.add_observation("s1", {"text": "o"}, "actor-1", Usage(output_tokens=2), observed_to=4)
    await memory.add_reflection("s1", {"text": "r"}, "actor-1", Usage(), reflected=1)
    assert await memory.claim_usage("s1", "r:g1") == Usage(input_tokens=5, output_tokens=2)

    keys = {k.decode(): await redis_client.ttl(k) async for k in redis_client.scan_iter("*")}
    forever = {k for k, left in keys.items() if left == -1}
    assert forever == {"lw:seq:s1"}, "only the seq counter outlives the session"
    assert keys["lw:step:gen:s1:g1"] > ttl and keys["lw:mem:xu:r:g1"] > ttl
    session_keys = [k for k in keys if k.startswith(("lw:s:", "lw:sessions", "lw:h:", "lw:e:", "lw:ek:", "lw:mem:s1", "lw:mem:actor"))]
    assert len(session_keys) >= 10 and all(0 < keys[k] <= ttl for k in session_keys)


@pytest.mark.integration
async def test_a_claim_is_made_once_per_step(redis_client: Any) -> None:
    memory = MemoryStore(redis_client)
    assert await memory.claim_usage("s1", "r:g1") is None
    await memory.add_usage("s1", Usage(input_tokens=7))
    assert await memory.claim_usage("s1", "r:g1") is None, "g1 claimed (nothing) already: a redelivery agrees"
    assert await memory.claim_usage("s1", "r:g2") == Usage(input_tokens=7)
    assert await memory.claim_usage("s1", "r:g2") == Usage(input_tokens=7)
    assert await memory.claim_usage("s1", "r:g3") is None
