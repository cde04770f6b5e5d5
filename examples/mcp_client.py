"""loopwire's tools from any MCP client: `loopwire mcp` serves every tool the tools
service knows (NATS providers, Python tools, MCP servers) over stdio; this script is such
a client, with the MCP Python SDK. It lists the tools and calls one.

    python examples/mcp_client.py calculator '{"expression": "17 * 23 + 4"}' [--nats-url URL]
"""

import argparse
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client


async def main(url: str, tool: str, arguments: dict) -> int:
    env = {**os.environ, "LOOPWIRE_NATS_URL": url, "LOOPWIRE_LOG_LEVEL": "WARNING"}
    server = StdioServerParameters(command=sys.executable, args=["-m", "loopwire.cli", "mcp"], env=env)
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, client_info=types.Implementation(name="example", version="1")) as mcp:
            await mcp.initialize()
            for _ in range(50):  # a tool provider that just started is discovered within seconds
                listed = (await mcp.list_tools()).tools
                if any(t.name == tool for t in listed):
                    break
                await asyncio.sleep(0.2)
            print("tools:", ", ".join(sorted(t.name for t in listed)))
            result = await mcp.call_tool(tool, arguments)
            text = "".join(block.text for block in result.content if isinstance(block, types.TextContent))
            print(f"{tool} -> {text}" + (" (error)" if result.is_error else ""))
            return 1 if result.is_error else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("tool")
    parser.add_argument("arguments", help="the tool's input, as JSON")
    parser.add_argument("--nats-url", default=os.environ.get("LOOPWIRE_NATS_URL", "nats://127.0.0.1:4222"))
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.nats_url, args.tool, json.loads(args.arguments))))
