"""Exact token counts for the memory service: the Messages API's `count_tokens` endpoint.

The memory service measures every request before it goes to the model
(services/memory/tokens.py), and an exact count needs the model's client, which is the
llm service's. So the memory service asks here: a core request/reply on
`<prefix>.rpc.llm.count_tokens` (one queue group across replicas), or a call when both
run in one process (`ServiceContext.here("llm", GenerationService)`). It keeps the answers (in process and
in Redis, keys.token_count) and estimates when none comes.

Whether there is an endpoint to ask follows `LOOPWIRE_MEMORY_TOKEN_COUNTING`: `estimate`
never asks, `api` always asks Anthropic, `auto` asks when the llm service's provider is
Anthropic (providers.py).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg
from pydantic import ValidationError

from loopwire.shared.contract.envelopes import CountTokens, TokenCount

from .providers import resolve_provider
from .responder import CoreResponder
from .settings import LlmSettings

if TYPE_CHECKING:  # the SDK is imported only where a client is built (anthropic_model.py)
    import anthropic

log = logging.getLogger("loopwire.llm.token_count")

COUNT_TIMEOUT_S = 10.0


class AnthropicTokenCount:
    """Counts through the official SDK; `client` None: nothing is counted."""

    def __init__(self, client: anthropic.AsyncAnthropic | None) -> None:
        self.client = client

    async def count(self, request: CountTokens) -> TokenCount:
        if self.client is None:
            return TokenCount(error="no count_tokens endpoint is configured")
        params: dict[str, Any] = {"model": request.model, "messages": request.messages}
        if request.system:
            params["system"] = request.system
        if request.tools:
            params["tools"] = [{"name": t.name, "input_schema": t.input_schema,
                                **({"description": t.description} if t.description else {})} for t in request.tools]
        import anthropic  # loaded with the client already

        try:
            result = await self.client.messages.count_tokens(**params, timeout=COUNT_TIMEOUT_S)
            return TokenCount(input_tokens=int(result.input_tokens))
        except anthropic.APIStatusError as exc:
            return TokenCount(status=exc.status_code, error=type(exc).__name__)
        except Exception as exc:  # connection refused, timeout: not reachable now
            return TokenCount(error=type(exc).__name__)

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.close()


def token_count_from_settings(settings: LlmSettings, environ: Mapping[str, str] | None = None) -> AnthropicTokenCount:
    """The counter the llm service answers with, from `memory_token_counting`."""
    mode = settings.memory_token_counting  # auto, api or estimate (checked by LlmSettings)
    client = None
    if mode == "api" or (mode == "auto" and resolve_provider(settings, environ) == "anthropic"):
        from .anthropic_model import build_client

        client = build_client(settings, environ)
    return AnthropicTokenCount(client)


class TokenCountResponder(CoreResponder):
    """Answers `<prefix>.rpc.llm.count_tokens`."""

    def __init__(self, counter: AnthropicTokenCount, subject: str, queue: str) -> None:
        super().__init__(subject, queue)
        self.counter = counter

    async def _reply(self, msg: Msg) -> None:
        try:
            request = CountTokens.model_validate_json(msg.data)
        except ValidationError as exc:
            answer = TokenCount(status=400, error=f"a malformed count_tokens request: {exc.error_count()} errors")
        else:
            answer = await self.counter.count(request)
        with contextlib.suppress(Exception):  # the caller gone: it estimates
            await msg.respond(answer.model_dump_json(exclude_none=True).encode())
