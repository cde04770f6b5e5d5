"""Per-tool retries for transient failures.

A tool opts in: `@tool(retries=2, retry_backoff_s=0.2)` in Python, or endpoint metadata
`"loopwire.retries": "2"`, `"loopwire.retry_backoff_s": "0.2"` for a NATS provider.
Transient means: no provider answered (NATS no-responders, e.g. during a provider's
restart) or a Python tool raised `TransientToolError`. Every retry reuses the call's
Loopwire-Tool-Use-Id, so a provider that did the work once can answer from its own
record. The per-call timeout bounds all attempts together.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

RETRIES_KEY = "loopwire.retries"
BACKOFF_KEY = "loopwire.retry_backoff_s"


class TransientToolError(Exception):
    """Raise from a Python tool when trying again may work (a busy backend, a flaky link)."""


@dataclass(frozen=True)
class RetryPolicy:
    retries: int = 0
    """Attempts after the first."""
    backoff_s: float = 0.2
    """First delay; doubles each retry, with jitter."""

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> RetryPolicy:
        try:
            retries = max(0, min(10, int(meta.get(RETRIES_KEY, 0))))
            backoff = max(0.0, min(30.0, float(meta.get(BACKOFF_KEY, 0.2))))
        except (TypeError, ValueError):
            return cls()
        return cls(retries, backoff)


async def with_retries(attempt: Callable[[], Awaitable[T]], policy: RetryPolicy,
                       transient: tuple[type[BaseException], ...],
                       *, sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> T:
    for n in range(policy.retries + 1):
        try:
            return await attempt()
        except transient:
            if n == policy.retries:
                raise
            await sleep(policy.backoff_s * (2 ** n) * random.uniform(0.5, 1.0))
    raise AssertionError("unreachable")
