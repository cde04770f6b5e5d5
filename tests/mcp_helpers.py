"""Starting the test MCP server (tests/fakes/mcp_server.py) as loopwire would see it:
a stdio command for LOOPWIRE_MCP_SERVERS, or a streamable-HTTP process of its own."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopwire.testing.servers import free_port, wait_port

ROOT = Path(__file__).resolve().parent.parent


def stdio_server(pid_file: Path | None = None) -> dict[str, Any]:
    """A LOOPWIRE_MCP_SERVERS entry that runs the test server over stdio."""
    args = ["-m", "tests.fakes.mcp_server"]
    if pid_file is not None:
        args += ["--pid-file", str(pid_file)]
    return {"command": sys.executable, "args": args, "cwd": str(ROOT)}


@contextlib.contextmanager
def http_server() -> Iterator[str]:
    """The test server over streamable HTTP in a process of its own; yields its URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.mcp_server", "--http", str(port)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=30, proc=proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
