"""The memory snapshot claims a step's usage in its own round trip, also after Redis lost
its scripts (a restart: NOSCRIPT), and a claim is answered the same way twice."""

from __future__ import annotations

import uuid
from typing import Any

from loopwire.memory.store import MemoryStore
from loopwire.shared.contract.envelopes import Usage


async def test_snapshot_claims_the_usage_once_per_step_even_after_a_script_flush(redis_client: Any) -> None:
    store = MemoryStore(redis_client)
    sid = f"claim-{uuid.uuid4().hex[:8]}"
    await store.add_usage(sid, Usage(input_tokens=30, output_tokens=7))
    await redis_client.script_flush()  # as after a Redis restart: EVALSHA answers NOSCRIPT

    snap = await store.snapshot(sid, None, 0, reflections=0, claim_for="run:g1")
    assert snap.claimed == Usage(input_tokens=30, output_tokens=7)

    # The same step again (a redelivery) gets the same answer; the next step gets nothing new.
    again = await store.snapshot(sid, None, 0, reflections=0, claim_for="run:g1")
    assert again.claimed == Usage(input_tokens=30, output_tokens=7)
    assert (await store.snapshot(sid, None, 0, reflections=0, claim_for="run:g2")).claimed is None
    assert (await store.snapshot(sid, None, 0, reflections=0)).claimed is None
