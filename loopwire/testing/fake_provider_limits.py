"""A provider's own rate limits and latency, for the fake Messages API (fake_anthropic.py).

A real provider answers 429 with `retry-after` once a key is past its requests per minute
or its concurrent requests; a real model takes seconds, its first token after a while and
the rest at some tokens per second. The fake does both, per model (`"*"` for any):

    server.enforce("claude-x", rpm=10, max_in_flight=2, retry_after=1.5)
    server.latency("*", first_token_s=1.0, total_s=5.0, chunks=4)

A request over a limit is answered 429 (`rate_limit_error`) with `retry-after` and counted
in `rate_limited`; it does not count against the window. Latency applies to every answer
whose spec sets no `delay_s` of its own: `delay_s` = `first_token_s`, and the text in
`chunks` pieces `chunk_delay_s` apart, so a 5 s generation costs the fake a few writes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .fake_server import ResponseSpec


@dataclass
class ProviderLimit:
    rpm: int | None = None
    max_in_flight: int | None = None
    window_s: float = 60.0
    retry_after: float = 1.0
    started: deque[float] = field(default_factory=deque)
    """When each request it let through began (monotonic), oldest first."""


@dataclass(frozen=True)
class Latency:
    first_token_s: float
    total_s: float
    chunks: int


class ProviderLimits:
    """The limits and latencies of the fake's models; thread-safe (handler threads ask)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.limits: dict[str, ProviderLimit] = {}
        self.latencies: dict[str, Latency] = {}
        self.rate_limited: list[tuple[str, float]] = []
        """(model, monotonic time) of each request answered 429 by a limit."""

    def enforce(self, model: str = "*", *, rpm: int | None = None, max_in_flight: int | None = None,
                window_s: float = 60.0, retry_after: float = 1.0) -> None:
        with self._lock:
            self.limits[model] = ProviderLimit(rpm, max_in_flight, window_s, retry_after)

    def latency(self, model: str = "*", *, first_token_s: float = 1.0, total_s: float = 5.0, chunks: int = 4) -> None:
        with self._lock:
            self.latencies[model] = Latency(first_token_s, max(total_s, first_token_s), max(1, chunks))

    def clear(self) -> None:
        with self._lock:
            self.limits.clear()
            self.latencies.clear()
            self.rate_limited.clear()

    def refusal(self, model: str, in_flight: int) -> float | None:
        """The `retry-after` of a 429 for this request (`in_flight` counts it), or None: it
        may go, and counts against the window."""
        with self._lock:
            limit = self.limits.get(model) or self.limits.get("*")
            if limit is None:
                return None
            now = time.monotonic()
            while limit.started and limit.started[0] <= now - limit.window_s:
                limit.started.popleft()
            over = (limit.max_in_flight is not None and in_flight > limit.max_in_flight) or (
                limit.rpm is not None and len(limit.started) >= limit.rpm)
            if over:
                self.rate_limited.append((model, now))
                return limit.retry_after
            limit.started.append(now)
            return None

    def paced(self, model: str, spec: ResponseSpec) -> ResponseSpec:
        """`spec` with the model's latency, unless it sets its own."""
        with self._lock:
            latency = self.latencies.get(model) or self.latencies.get("*")
        if latency is None or spec.get("delay_s") is not None or spec.get("error"):
            return spec
        paced: ResponseSpec = {**spec, "delay_s": latency.first_token_s,
                               "chunk_delay_s": (latency.total_s - latency.first_token_s) / latency.chunks}
        text = paced.get("text")
        if isinstance(text, str) and text and not paced.get("chunks") and paced.get("content") is None:
            size = max(1, -(-len(text) // latency.chunks))
            paced["chunks"] = [text[i:i + size] for i in range(0, len(text), size)]
        return paced
