"""LOOPWIRE_MCP_SERVERS is checked at the tools service's start, with errors that name the
server and the problem and never a header's or variable's value."""

from __future__ import annotations

import pytest

from loopwire.settings import Settings
from loopwire.shared.contract.redaction import redact, register_secret
from loopwire.tools.mcp_config import McpConfigError, parse_servers, secret_values

pytestmark = pytest.mark.unit


def test_the_setting_is_checked_with_clear_errors() -> None:
    ok = parse_servers({"fs": {"command": "npx", "args": ["-y", "x"]}, "web": {"url": "http://h/mcp"}})
    assert ok["fs"].transport == "stdio" and ok["web"].transport == "streamable-http"
    for raw, expected in [
        ({"a__b": {"command": "x"}}, "server name 'a__b'"),
        ({"s": {}}, "give either `command`"),
        ({"s": {"command": "x", "url": "http://h"}}, "give either `command`"),
        ({"s": {"url": "ftp://h"}}, "must start with http"),
        ({"s": {"command": "x", "headers": {"Authorization": "Bearer secret-token"}}}, "`headers` are for"),
        ({"s": {"command": "x", "colour": 1}}, "colour"),
    ]:
        with pytest.raises(McpConfigError, match=expected) as err:
            parse_servers(raw)
        assert "secret-token" not in str(err.value)
    with pytest.raises(ValueError, match="not JSON"):
        Settings(mcp_servers="{nope")  # type: ignore[arg-type]


def test_tokens_in_headers_and_secret_variables_are_masked_everywhere() -> None:
    servers = parse_servers({
        "web": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer tok-3f9a1c", "X-Trace": "on-please"}},
        "fs": {"command": "srv", "env": {"GITHUB_TOKEN": "ghp-77aa", "LOG_LEVEL": "warn"}},
    })
    values = secret_values(servers)
    assert {"Bearer tok-3f9a1c", "tok-3f9a1c", "on-please", "ghp-77aa"} <= set(values)
    assert "warn" not in values
    for value in values:
        register_secret(value, min_length=4)
    assert redact("server said: bad token tok-3f9a1c; env ghp-77aa") == (
        "server said: bad token ***; env ***")
