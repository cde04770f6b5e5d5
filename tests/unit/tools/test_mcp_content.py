"""MCP results as the model's tool_result content, and loopwire content as MCP content
(`loopwire mcp`): every kind of MCP content block, structured content, isError."""

from __future__ import annotations

import pytest
from mcp import types

from loopwire.mcp_serve import client_session, mcp_content
from loopwire.tools.mcp_content import outcome_of

pytestmark = pytest.mark.unit


def result(*content: object, structured: object = None, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=list(content), structured_content=structured, is_error=error)  # type: ignore[arg-type]


def test_one_text_block_is_a_string_and_is_error_carries_over() -> None:
    out = outcome_of(result(types.TextContent(type="text", text="no such file"), error=True))
    assert (out.content, out.is_error) == ("no such file", True)
    assert outcome_of(result()).content == ""


def test_every_other_kind_of_content_becomes_a_block_the_model_can_read() -> None:
    out = outcome_of(result(
        types.ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
        types.AudioContent(type="audio", data="AAAA" * 10, mime_type="audio/wav"),
        types.EmbeddedResource(type="resource", resource=types.TextResourceContents(
            uri="file:///notes.txt", text="buy milk", mime_type="text/plain")),
        types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri="file:///a.bin", blob="AAAA", mime_type="application/octet-stream")),
        types.ResourceLink(type="resource_link", uri="file:///big.csv", name="big.csv"),
    ))
    image, audio, text_res, blob_res, link = out.content
    assert image == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": "iVBORw0KGgo="}}
    assert audio == {"type": "text", "text": "[audio (audio/wav), 30 bytes: not shown]"}
    assert text_res == {"type": "text", "text": "[resource file:///notes.txt]\nbuy milk"}
    assert blob_res["text"] == "[resource file:///a.bin (application/octet-stream), 3 bytes: not shown]"
    assert link["text"] == "[resource link big.csv: file:///big.csv]"


def test_structured_content_is_given_once() -> None:
    # Repeated as JSON text (what the SDK's MCPServer sends): once.
    same = outcome_of(result(types.TextContent(type="text", text='{"t": 21.5}'), structured={"t": 21.5}))
    assert same.content == '{"t": 21.5}'
    # A plain value wrapped as {"result": v} with v as the text: once.
    wrapped = outcome_of(result(types.TextContent(type="text", text="sunny"), structured={"result": "sunny"}))
    assert wrapped.content == "sunny"
    # Only structured: its JSON. Structured beside other text: both.
    assert outcome_of(result(structured={"t": 3})).content == '{"t":3}'
    both = outcome_of(result(types.TextContent(type="text", text="see data"), structured={"rows": 2}))
    assert both.content == [{"type": "text", "text": "see data"}, {"type": "text", "text": '{"rows":2}'}]


def test_loopwire_content_as_mcp_content() -> None:
    assert mcp_content("42") == [types.TextContent(type="text", text="42")]
    blocks = mcp_content([
        {"type": "text", "text": "a pixel"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lG"}},
        {"type": "text", "text": "preview…", "loopwire_ref": {"sha256": "ab", "bytes": 9}},
        {"type": "document", "source": {"type": "url", "url": "https://x"}},
    ])
    assert blocks[0] == types.TextContent(type="text", text="a pixel")
    assert blocks[1] == types.ImageContent(type="image", data="R0lG", mime_type="image/gif")
    assert blocks[2] == types.TextContent(type="text", text="preview…")
    assert isinstance(blocks[3], types.TextContent) and '"document"' in blocks[3].text


def test_client_sessions_are_valid_session_ids() -> None:
    assert client_session("claude-code", "1a2b3c") == "mcp-claude-code-1a2b3c"
    assert client_session("My Editor (beta)", "f" * 64) == "mcp-My-Editor-beta-" + "f" * 32
    assert client_session(None, "x") == "mcp-client-x"
