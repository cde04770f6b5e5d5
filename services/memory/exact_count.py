"""The memory service's way to exact token counts: the llm service, which owns the model client.

The dispatcher's `count_tokens` ask (shared/runtime/dispatcher.py): a call when the llm service
runs in this process, else a core request on `<prefix>.rpc.llm.count_tokens`
(services/llm/token_count.py). A request nobody answers in time raises, and the counter
estimates meanwhile (tokens.py).
"""

from __future__ import annotations

from loopwire.shared.contract.envelopes import CountTokens, TokenCount
from loopwire.shared.runtime.service_context import ServiceContext

from .settings import MemorySettings


class LlmExactCount:
    def __init__(self, ctx: ServiceContext[MemorySettings]) -> None:
        self.ctx = ctx

    async def __call__(self, request: CountTokens) -> TokenCount:
        answer: TokenCount = await self.ctx.dispatch.ask("count_tokens", request)
        return answer
