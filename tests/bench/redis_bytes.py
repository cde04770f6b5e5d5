"""Redis bytes held for one session: `MEMORY USAGE` (exact, `SAMPLES 0`) of every key
that belongs to it, grouped by what the key holds."""

from __future__ import annotations

from collections import Counter

import redis.asyncio as aioredis

from loopwire.shared.contract import keys

GROUPS = {
    "lw:s": "state", "lw:h": "history", "lw:e": "events", "lw:ek": "event keys", "lw:seq": "seq",
    "lw:step:gen": "model records", "lw:step:tool": "tool records",
}


async def _scan(r: aioredis.Redis, pattern: str) -> list[bytes]:
    return [key async for key in r.scan_iter(match=pattern, count=1000)]


async def session_bytes(r: aioredis.Redis, sid: str, run_ids: list[str]) -> dict[str, int]:
    """{group: bytes} for session `sid` whose runs were `run_ids`; also `total` and `keys`."""
    held: list[tuple[str, bytes | str]] = [
        (GROUPS["lw:s"], keys.session_state(sid)), (GROUPS["lw:h"], keys.session_history(sid)),
        (GROUPS["lw:e"], keys.event_stream(sid)), (GROUPS["lw:ek"], keys.event_dedup(sid)),
        (GROUPS["lw:seq"], keys.event_seq(sid))]
    for run_id in run_ids:
        held += [(GROUPS["lw:step:gen"], k)
                 for k in await _scan(r, keys.step_record(keys.generation_step(sid, f"{run_id}:*")))]
    held += [(GROUPS["lw:step:tool"], k) for k in await _scan(r, keys.step_record(keys.tool_call_step(sid, "*")))]
    out: Counter[str] = Counter()
    found = 0
    for group, key in held:
        usage = await r.memory_usage(key, samples=0)
        if usage is not None:
            out[group] += int(usage)
            found += 1
    result = dict(out)
    result["total"] = sum(out.values())
    result["keys"] = found
    return result
