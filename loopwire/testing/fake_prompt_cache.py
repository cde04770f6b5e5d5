"""The fake Messages API's prompt cache, as the real one behaves for what a test can see:
it remembers, per model and for a TTL, the prefixes that end at a `cache_control`
breakpoint, and a later request reads the longest remembered prefix that ends at one of
its own breakpoints or within the 20 blocks before one. Its usage then says how much was
read (`cache_read_input_tokens`), written (`cache_creation_input_tokens`, the rest up to
the request's last breakpoint) and sent uncached (`input_tokens`, what follows it), so a
suite measures its hit rate (loopwire.testing, fake_anthropic.py).

A prefix is the API's order of blocks, each serialized canonically: the tools, the system
blocks, then every message's content blocks with their role; `cache_control` itself is
not part of it. Tokens are a quarter of each block's characters.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

from loopwire.shared.contract.messages import MessagesRequest

LOOKBACK = 20
"""Blocks before a breakpoint where a remembered prefix is still found (the API's)."""
TTL_S = {"5m": 300.0, "1h": 3600.0}


def _segments(body: MessagesRequest) -> list[tuple[str, bool, str]]:
    """(canonical JSON, is a breakpoint, its TTL) of each block, in the API's order."""
    out: list[tuple[str, bool, str]] = []

    def add(kind: str, block: Any) -> None:
        mark = block.get("cache_control") if isinstance(block, dict) else None
        clean = {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block
        out.append((json.dumps([kind, clean], sort_keys=True, separators=(",", ":")), mark is not None,
                    str((mark or {}).get("ttl") or "5m")))

    for tool in body.get("tools") or []:
        add("tool", tool)
    system = body.get("system")
    for block in ([{"type": "text", "text": system}] if isinstance(system, str) else system or []):
        add("system", block)
    for message in body.get("messages") or []:
        content = message.get("content")
        for block in ([{"type": "text", "text": content}] if isinstance(content, str) else content or []):
            add(str(message.get("role")), block)
    return out


class PromptCache:
    def __init__(self, clock: Any = time.monotonic) -> None:
        self.clock = clock
        self._until: dict[tuple[str, str], float] = {}
        """(model, prefix hash) -> until when it is remembered."""
        self.ttl_s = dict(TTL_S)
        """Seconds a prefix is kept by its breakpoint's TTL; a suite scales them down to see
        an expiry (`clear()` puts the API's back)."""

    def clear(self) -> None:
        self._until.clear()
        self.ttl_s = dict(TTL_S)

    def usage(self, model: str, body: MessagesRequest, total: int | None = None) -> dict[str, int] | None:
        """The request's input usage split by the cache, and the cache updated; None for a
        request without a breakpoint (its usage is counted as before). `total`: the
        request's input tokens as the fake counts them otherwise (count_tokens), which the
        split keeps: read and written are its share up to the breakpoints."""
        segments = _segments(body)
        marks = [n for n, (_, mark, _) in enumerate(segments) if mark]
        if not marks:
            return None
        hashes: list[str] = []
        totals: list[int] = []
        digest, running = hashlib.sha256(), 0
        for text, _, _ in segments:
            digest.update(text.encode())
            hashes.append(digest.copy().hexdigest())
            running += math.ceil(len(text) / 4)
            totals.append(running)
        now = self.clock()
        read = 0
        for mark in marks:
            for n in range(mark, max(mark - LOOKBACK, -1), -1):
                if self._until.get((model, hashes[n]), 0.0) > now:
                    read = max(read, totals[n])
                    break
        for mark in marks:
            self._until[(model, hashes[mark])] = now + self.ttl_s.get(segments[mark][2], self.ttl_s["5m"])
        written = max(0, totals[marks[-1]] - read)
        if total is not None and total != totals[-1] and totals[-1]:
            scale = total / totals[-1]
            read, written = int(read * scale), int(written * scale)
            return {"input_tokens": max(0, total - read - written), "cache_read_input_tokens": read,
                    "cache_creation_input_tokens": written}
        return {"input_tokens": max(0, totals[-1] - read - written), "cache_read_input_tokens": read,
                "cache_creation_input_tokens": written}
