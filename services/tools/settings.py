"""The tools service's own settings (``LOOPWIRE_*``): in-process tools, MCP servers,
provider pins, large results. The runtime's settings, and those the tools service shares
with other services (the tool timeout, the operator's tool policy, discovery), are
RuntimeSettings' (shared/runtime/settings.py)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from loopwire.shared.runtime.settings import RuntimeSettings, json_object


class ToolsSettings(RuntimeSettings):
    tools_max_handlers: int = Field(default=1024, gt=0)
    """Tool batches one tools replica runs at once (I/O-bound: each waits on a provider)."""
    large_content_bytes: int = 64 * 1024
    """Tool results larger than this are stored once in Redis (content-addressed) and
    travel as a reference block (shared/stores/blobs.py)."""
    tool_providers: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """JSON object `{tool name: service name}`: which provider serves a tool that several
    providers (different NATS service names) offer. Without a pin such a tool is a
    conflict: refused and reported, never served by either."""

    # -- tools ----------------------------------------------------------------------------
    tool_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Python modules to import for in-process tools (comma separated or JSON list)."""
    tool_attempt_timeout_s: float = 30.0
    """A provider request unanswered this long whose provider instance is gone (discovery
    forgot it) is sent again with the same Loopwire-Tool-Use-Id, within the call's timeout;
    so is one whose reply a NATS reconnect may have lost. A busy provider is waited for."""
    mcp_servers: Annotated[dict[str, dict[str, Any]], NoDecode] = Field(default_factory=dict, repr=False)
    """MCP servers whose tools the tools service offers (docs/tools.md), a JSON object
    `{"<server>": {"command": "...", "args": [...], "env": {...}}}` (stdio) or
    `{"<server>": {"url": "http://.../mcp", "headers": {...}}}` (streamable HTTP); optional
    per server: `timeout_s`, `retries`. Tool `t` of server `s` is the loopwire tool `s__t`."""

    @field_validator("tool_providers", mode="before")
    @classmethod
    def _tool_providers_json(cls, value: object) -> object:
        return json_object(value)

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _mcp_servers_json(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if not text:
                return {}
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"LOOPWIRE_MCP_SERVERS is not JSON: {exc}") from None
        return value

    @field_validator("tool_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value
