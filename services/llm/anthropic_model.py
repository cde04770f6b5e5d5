"""The Anthropic Messages API as a `Model`, on the official SDK's streaming API.

Text deltas are yielded (`TextDelta`) as they arrive; tool_use blocks are assembled by the SDK
from their `input_json` deltas and read from its final message, as is the usage: the
usage of a stream is cumulative (message_start, then totals in message_delta), so it is
taken once from the final message and never summed per event.

The SDK's own retries are off (`max_retries=0`): retrying.py owns retrying and
fallback.py switching model, each by its rule over these errors.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import anthropic
from anthropic._constants import DEFAULT_CONNECTION_LIMITS

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock

from .errors import classify
from .model import Model
from .model_call import ModelRequest, ModelResponse
from .model_events import Finished, ModelStream, TextDelta
from .prompt_cache import cached_params
from .settings import LlmSettings

PLACEHOLDER_API_KEY = "loopwire-local-no-key"
"""Sent when only ANTHROPIC_BASE_URL is set: a local or proxy server needs no real key,
but the SDK refuses to build a request without some credential."""


CONNECTIONS_PER_CLIENT = 128
"""Requests one SDK client carries at once. The default transport's connection pool looks at
every connection it holds on each request and each response it closes, so one pool of
thousands costs more CPU per request than the rest of the call; on aiohttp's, 1,000 requests
at once cost a fifth more CPU each on one pool of 4,096 than on pools of 128. The replica's
requests in flight are spread over several clients of this size instead (`AnthropicModel`)."""


def build_client(settings: LlmSettings, environ: Mapping[str, str] | None = None,
                 max_connections: int | None = None) -> anthropic.AsyncAnthropic:
    """An AsyncAnthropic client honouring ANTHROPIC_API_KEY / ANTHROPIC_BASE_URL."""
    env = os.environ if environ is None else environ
    api_key = env.get("ANTHROPIC_API_KEY") or None
    base_url = env.get("ANTHROPIC_BASE_URL") or None
    if api_key is None and base_url is not None and not env.get("ANTHROPIC_AUTH_TOKEN"):
        api_key = PLACEHOLDER_API_KEY
    # The connection pool holds every generation the replica may have in flight
    # (LOOPWIRE_LLM_MAX_HANDLERS): the SDK's default of 1,000 would queue the rest in the
    # pool. Its Limits type is the SDK's own HTTP library's (httpx, or the fork it ships with).
    limits = type(DEFAULT_CONNECTION_LIMITS)(max_connections=max(max_connections or settings.llm_max_handlers, 1),
                                             max_keepalive_connections=DEFAULT_CONNECTION_LIMITS.max_keepalive_connections)
    return anthropic.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0,
                                    timeout=settings.llm_timeout_s, http_client=http_client(limits))


def http_client(limits: Any) -> Any:
    """The SDK's HTTP client on aiohttp, its own transport for it, when aiohttp is installed
    (`pip install 'loopwire[aiohttp]'`): a generation through it costs about half the CPU of
    one through the default transport (its connection pool and HTTP/1.1 parser are in C), and
    the replica's CPU is what bounds its generations in flight on a provider that takes
    seconds. Not installed by default: nats-py imports aiohttp at start when it is there, ~11
    MB in every process. Its errors reach errors.py as the default transport's do (the SDK
    maps them to httpx's)."""
    try:
        import aiohttp  # noqa: F401  # the extra is installed
    except ImportError:
        return anthropic.DefaultAsyncHttpxClient(limits=limits)
    return anthropic.DefaultAioHttpClient(limits=limits)


def _block_to_dict(block: Any) -> ContentBlock:
    """An SDK content block as the plain dict the history stores (and sends back)."""
    kind = getattr(block, "type", None)
    if kind == "text":
        out: ContentBlock = {"type": "text", "text": block.text}
        if getattr(block, "citations", None):
            out["citations"] = [c.model_dump(mode="json", exclude_none=True) for c in block.citations]
        return out
    if kind == "tool_use":
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": dict(block.input or {})}
    if kind == "thinking":
        return {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    dumped = block.model_dump(mode="json", exclude_none=True)  # a block type the SDK knows and this module does not
    dumped.pop("parsed_output", None)
    return dumped


def _usage(raw: Any) -> Usage:
    return Usage(
        input_tokens=raw.input_tokens or 0,
        output_tokens=raw.output_tokens or 0,
        cache_read_input_tokens=getattr(raw, "cache_read_input_tokens", None) or 0,
        cache_creation_input_tokens=getattr(raw, "cache_creation_input_tokens", None) or 0,
    )


def request_params(request: ModelRequest) -> dict[str, Any]:
    """The keyword arguments of `messages.stream` for one request."""
    params: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": request.messages,
    }
    if request.system:
        params["system"] = request.system
    if request.tools:
        params["tools"] = [
            {"name": t.name, "input_schema": t.input_schema, **({"description": t.description} if t.description else {})}
            for t in request.tools
        ]
    if request.temperature is not None:
        # This SDK release dropped `temperature` from its typed parameters; the API
        # still takes it in the body.
        params["extra_body"] = {"temperature": request.temperature}
    return cached_params(request, params) if request.prompt_cache else params


class AnthropicModel(Model):
    """Any model id (the id travels in the request), on one client, or on as many clients
    of `per_client` requests as the requests in flight need (`more` makes the next one)."""

    name = "anthropic"

    def __init__(self, client: anthropic.AsyncAnthropic, *, more: Callable[[], anthropic.AsyncAnthropic] | None = None,
                 most: int = 1, per_client: int = CONNECTIONS_PER_CLIENT) -> None:
        self._clients = [client]
        self._in_flight = [0]
        self._more = more
        self._most = max(1, most)
        self._per_client = per_client

    @classmethod
    def from_settings(cls, settings: LlmSettings, environ: Mapping[str, str] | None = None) -> AnthropicModel:
        """Clients of CONNECTIONS_PER_CLIENT for the replica's LOOPWIRE_LLM_MAX_HANDLERS."""
        size = min(CONNECTIONS_PER_CLIENT, settings.llm_max_handlers)
        return cls(build_client(settings, environ, size), more=lambda: build_client(settings, environ, size),
                   most=-(-settings.llm_max_handlers // size), per_client=size)

    @property
    def base_url(self) -> str:
        return str(self._clients[0].base_url)

    def _take(self) -> int:
        """The first client with room (its connections kept alive for the next request),
        else a new one, else the least busy."""
        free = next((i for i, n in enumerate(self._in_flight) if n < self._per_client), None)
        if free is None and self._more is not None and len(self._clients) < self._most:
            self._clients.append(self._more())
            self._in_flight.append(0)
            free = len(self._clients) - 1
        if free is None:
            free = min(range(len(self._clients)), key=self._in_flight.__getitem__)
        self._in_flight[free] += 1
        return free

    async def stream(self, request: ModelRequest) -> ModelStream:
        # A failure of the caller (publishing a delta, say) happens in the caller's frame, not
        # here: only the call's own failures are classified. A caller that stops reading
        # closes this stream, and the SDK's stream with it.
        i = self._take()
        try:
            async with self._clients[i].messages.stream(**request_params(request)) as stream:
                async for event in stream:
                    if event.type == "content_block_delta" and event.delta.type == "text_delta" and event.delta.text:
                        yield TextDelta(event.delta.text)
                final = await stream.get_final_message()
        except Exception as exc:  # every failure of the call leaves as a ModelCallError
            raise classify(exc, request.model) from exc
        finally:
            self._in_flight[i] -= 1
        yield Finished(ModelResponse(
            message={"role": "assistant", "content": [_block_to_dict(b) for b in final.content]},
            stop_reason=final.stop_reason,
            model=final.model or request.model,
            usage=_usage(final.usage),
            response_id=final.id,
        ))

    async def aclose(self) -> None:
        for client in self._clients:
            await client.close()
