"""An MCP server written with the official SDK (`MCPServer`), for the tests of MCP servers
as loopwire tool providers. Run it as a process::

    python -m tests.fakes.mcp_server                 # stdio
    python -m tests.fakes.mcp_server --http PORT     # streamable HTTP at http://127.0.0.1:PORT/mcp

Tools: `echo` (text), `echo_count` (how many times `echo` ran here), `fail` (an `isError` result), `pixel` (an image and text), `measure`
(structured content), `enable_extra` (adds the tool `extra` and sends
`notifications/tools/list_changed`), `sleep`, `whoami` (this process's pid: a restarted server
answers with another), `meta` (the call's `loopwire/...` `_meta` keys, as JSON). With `--pid-file PATH` the process appends its pid to that file
at start (one line per process: a restart, or a second tools replica, adds a line), so a
test can kill it and count the processes.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent
from pydantic import BaseModel

# A 1x1 transparent PNG.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=")

server = MCPServer("loopwire-test-mcp")


class Measurement(BaseModel):
    length: int
    upper: str


ECHOED: list[str] = []


@server.tool(description="Echo the text back, prefixed with 'echo: '.")
def echo(text: str) -> str:
    ECHOED.append(text)
    return f"echo: {text}"


@server.tool(description="How many times `echo` ran in this process.")
def echo_count() -> str:
    return str(len(ECHOED))


@server.tool(description="Always fails with the given reason (an isError result).")
def fail(reason: str) -> str:
    raise ToolError(f"refused: {reason}")


@server.tool(description="A one-pixel PNG and a caption.")
def pixel() -> list[TextContent | ImageContent]:
    return [TextContent(type="text", text="a pixel"),
            ImageContent(type="image", data=base64.b64encode(PIXEL_PNG).decode(), mime_type="image/png")]


@server.tool(description="Length and upper-case form of a word (structured content).")
def measure(word: str) -> Measurement:
    return Measurement(length=len(word), upper=word.upper())


@server.tool(description="Sleep, then say so.")
async def sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds}s"


@server.tool(description="The process id of this server.")
def whoami() -> str:
    return str(os.getpid())


def extra(n: int) -> str:
    """A tool that exists only after enable_extra was called."""
    return f"extra {n * 2}"


@server.tool(description="The loopwire `_meta` keys of this call, as JSON.")
def meta(ctx: Context) -> str:
    raw = ctx.request_context.meta
    fields = raw.model_dump() if hasattr(raw, "model_dump") else dict(raw or {})
    return json.dumps({k: v for k, v in fields.items() if k.startswith("loopwire/")}, sort_keys=True)


@server.tool(description="Add the tool `extra` and tell the client the tool list changed.")
async def enable_extra(ctx: Context) -> str:
    server.add_tool(extra, name="extra", description="Double a number (added at run time).")
    await ctx.session.send_tool_list_changed()
    return "extra enabled"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None, help="serve streamable HTTP on this port")
    parser.add_argument("--pid-file", default=None)
    args = parser.parse_args()
    if args.pid_file:
        with Path(args.pid_file).open("a") as pids:
            pids.write(f"{os.getpid()}\n")
    if args.http is not None:
        server.run("streamable-http", host="127.0.0.1", port=args.http)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
