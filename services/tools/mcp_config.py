"""`LOOPWIRE_MCP_SERVERS`: the MCP servers an operator lets the tools service use.

A JSON object, one entry per server::

    {"files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/srv"],
               "env": {"LOG_LEVEL": "warn"}},
     "search": {"url": "https://search.example/mcp", "headers": {"Authorization": "Bearer ..."},
                "timeout_s": 30, "retries": 1}}

An entry with `command` is a stdio server (a process of the tools replica that reads it);
one with `url` is a streamable-HTTP server. The server's name becomes the prefix of its
tools' names (`files__read_file`), so it follows the tool-name alphabet and has no `__`
of its own (the first `__` of a loopwire tool name always ends the server's name).
`env` and `headers` may hold secrets: nothing here puts them in a log line or an error.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

SEPARATOR = "__"
"""Between the server's name and the tool's: tool `t` of server `s` is `s__t`."""

SERVER_NAME_RE = re.compile(r"^[A-Za-z0-9-]+(_[A-Za-z0-9-]+)*$")
"""Tool-name characters, with no `__` and no leading or trailing `_`."""


class McpServerConfig(BaseModel):
    """One entry of LOOPWIRE_MCP_SERVERS."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = None
    """stdio: the program to run (looked up on PATH)."""
    args: list[str] = Field(default_factory=list)
    """stdio: its arguments."""
    env: dict[str, str] = Field(default_factory=dict, repr=False)
    """stdio: variables added to the safe default environment of the MCP SDK (HOME, PATH, ...)."""
    cwd: str | None = None
    """stdio: working directory of the process."""
    url: str | None = None
    """streamable HTTP: the endpoint (usually ending in `/mcp`)."""
    headers: dict[str, str] = Field(default_factory=dict, repr=False)
    """streamable HTTP: headers sent with every request (a bearer token)."""
    timeout_s: float | None = Field(default=None, gt=0)
    """Per-call timeout of this server's tools (default: LOOPWIRE_TOOL_TIMEOUT_S)."""
    retries: int = Field(default=0, ge=0, le=10)
    """Retries of a call that could not reach the server (it was not connected)."""
    retry_backoff_s: float = Field(default=0.2, ge=0, le=30)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give either `command` (stdio) or `url` (streamable HTTP)")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError("`url` must start with http:// or https://")
        if self.url is None and self.headers:
            raise ValueError("`headers` are for a `url` server")
        if self.command is None and (self.args or self.env or self.cwd):
            raise ValueError("`args`, `env` and `cwd` are for a `command` server")
        return self

    @property
    def transport(self) -> str:
        return "stdio" if self.command is not None else "streamable-http"

    def describe(self) -> str:
        """Where the server is, for logs: the command or the URL, never env or headers."""
        if self.command is not None:
            return " ".join([self.command, *self.args])
        return str(self.url)


class McpConfigError(ValueError):
    """LOOPWIRE_MCP_SERVERS names a server wrongly; raised at the tools service's start."""


def parse_servers(raw: dict[str, Any]) -> dict[str, McpServerConfig]:
    """Every server of the setting, checked; the first problem raises McpConfigError
    with the server's name and what is wrong (no values: they may be secrets)."""
    if not isinstance(raw, dict):
        raise McpConfigError("LOOPWIRE_MCP_SERVERS must be a JSON object of servers by name")
    out: dict[str, McpServerConfig] = {}
    for name, entry in raw.items():
        if not SERVER_NAME_RE.match(name) or len(name) > 40:
            raise McpConfigError(f"LOOPWIRE_MCP_SERVERS: server name {name!r} must be 1-40 characters of "
                                 "[A-Za-z0-9_-], without `__` and not starting or ending with `_`")
        if not isinstance(entry, dict):
            raise McpConfigError(f"LOOPWIRE_MCP_SERVERS: server {name}: expected an object")
        try:
            out[name] = McpServerConfig.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in exc.errors())
            raise McpConfigError(f"LOOPWIRE_MCP_SERVERS: server {name}: {problems}") from None
    return out


SECRET_ENV_RE = re.compile(r"TOKEN|KEY|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)


def secret_values(configs: dict[str, McpServerConfig]) -> list[str]:
    """What to mask in every redacted output (contract/redaction.py, `register_secret`): every
    header value, and the values of variables named like secrets. A server that echoes its
    token in an error message then shows `***` in log lines, spans and error events.
    (Masking every `env` value would garble logs with words like `warn`.)"""
    values: list[str] = []
    for cfg in configs.values():
        values.extend(cfg.headers.values())
        for key, value in cfg.headers.items():
            if key.lower() == "authorization" and " " in value:
                values.append(value.split(" ", 1)[1])  # the bare token after "Bearer "
        values.extend(value for key, value in cfg.env.items() if SECRET_ENV_RE.search(key))
    return values


def loopwire_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"
