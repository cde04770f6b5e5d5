"""LOOPWIRE_MCP_SERVERS is checked at the tools service's start, with errors that name the
server and the problem and never a header's or variable's value."""

from __future__ import annotations

import pytest

from loopwire.shared.settings import Settings
from loopwire.tools.mcp_config import McpConfigError, parse_servers

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
