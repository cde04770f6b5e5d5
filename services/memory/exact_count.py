"""The memory service's way to exact token counts: the llm service, which owns the model client.

A call when the llm service runs in this process (`ServiceContext.here("llm", GenerationService)`), else a
core request on `<prefix>.rpc.llm.count_tokens` (services/llm/token_count.py). A request
nobody answers in time raises, and the counter estimates meanwhile (tokens.py).
"""

from __future__ import annotations

from loopwire.shared.contract.envelopes import CountTokens, TokenCount
from loopwire.shared.runtime.handover import GenerationService
from loopwire.shared.runtime.service_context import ServiceContext

REQUEST_TIMEOUT_S = 12.0
"""The llm service gives the endpoint 10 s (services/llm/token_count.py); a little more here."""


class LlmExactCount:
    def __init__(self, ctx: ServiceContext, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.ctx = ctx
        self.timeout_s = timeout_s

    async def __call__(self, request: CountTokens) -> TokenCount:
        llm = self.ctx.here("llm", GenerationService)
        if llm is not None:
            return await llm.count_tokens(request)
        reply = await self.ctx.bus.nc.request(self.ctx.subjects.llm_count_tokens,
                                              request.model_dump_json().encode(), timeout=self.timeout_s)
        return TokenCount.model_validate_json(reply.data)
