"""Redis bytes held for one session: `MEMORY USAGE` (exact, `SAMPLES 0`) of every key
that belongs to it, grouped by what the key holds."""

from __future__ import annotations

from collections import Counter

import redis.asyncio as aioredis

GROUPS = {
    "lw:s": "state", "lw:h": "history", "lw:e": "events", "lw:ek": "event keys", "lw:seq": "seq",
    "lw:step:gen": "model records", "lw:step:tool": "tool records",
}


async def _scan(r: aioredis.Redis, pattern: str) -> list[bytes]:
    return [key async for key in r.scan_iter(match=pattern, count=1000)]


async def session_bytes(r: aioredis.Redis, sid: str, run_ids: list[str]) -> dict[str, int]:
    """{group: bytes} for session `sid` whose runs were `run_ids`; also `total` and `keys`."""
    keys: list[tuple[str, bytes | str]] = [(GROUPS[f"lw:{k}"], f"lw:{k}:{sid}") for k in ("s", "h", "e", "ek", "seq")]
    for run_id in run_ids:
        keys += [(GROUPS["lw:step:gen"], k) for k in await _scan(r, f"lw:step:gen:{run_id}:*")]
    keys += [(GROUPS["lw:step:tool"], k) for k in await _scan(r, f"lw:step:tool:{sid}:*")]
    out: Counter[str] = Counter()
    found = 0
    for group, key in keys:
        usage = await r.memory_usage(key, samples=0)
        if usage is not None:
            out[group] += int(usage)
            found += 1
    result = dict(out)
    result["total"] = sum(out.values())
    result["keys"] = found
    return result
