"""What one service may call on another that runs in the same process.

Inside `loopwire up` (LOOPWIRE_LOCAL_HANDOVER) a hop between services can be a call
instead of a JetStream message (shared/runtime/chain.py). The caller never imports the
other service: it asks `ServiceContext.here(name)`, and gets the service as one of the
protocols below, or None when that service does not run here (then it publishes).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

from loopwire.shared.contract.envelopes import (
    CountTokens,
    ExecutorPermission,
    Generate,
    GenerationResult,
    TokenCount,
    ToolsResult,
)


@runtime_checkable
class ResultReceiver(Protocol):
    """The router, as the llm and tools services hand it a step's result."""

    async def accept_result(self, result: GenerationResult | ToolsResult | ExecutorPermission,
                            recover: bool = False) -> Any: ...


@runtime_checkable
class GenerationService(Protocol):
    """The llm service, as the memory service hands it a generation or asks it for a count."""

    async def process(self, env: Generate,
                      heartbeat: Callable[[], Awaitable[None]] | None = None) -> GenerationResult: ...

    async def count_tokens(self, request: CountTokens) -> TokenCount: ...
