"""`loopwire up` waits for NATS and Redis before it starts the services, and says so.

The services themselves retry their connections quietly for as long as it takes; run by
hand, that looks like a command that hangs. So `up` first checks both servers, printing
what it waits for (and why, e.g. "connection refused") every few seconds until they answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from rich.console import Console

from loopwire.settings import Settings

from .connection import CliError, connect_nats

REPEAT_S = 5.0
"""How often the same waiting line is printed again."""


async def nats_problem(settings: Settings) -> str | None:
    try:
        nc = await connect_nats(settings, timeout=1.0)
    except CliError as exc:
        return str(exc)
    with contextlib.suppress(Exception):
        await nc.close()
    return None


async def redis_problem(settings: Settings) -> str | None:
    from loopwire.shared.contract.redaction import redact
    from loopwire.shared.runtime.credentials import connect_configured_redis, display_url
    from loopwire.shared.stores.redis_connection import answers

    client = connect_configured_redis(settings, socket_connect_timeout=1.0, socket_timeout=1.0)
    try:
        if not await answers(client):
            raise ConnectionError("PING unanswered")
    except Exception as exc:  # any failure is a reason to wait; it is shown, not raised
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"cannot reach Redis at {display_url(settings.redis_url)} ({redact(reason)})"
    finally:
        with contextlib.suppress(Exception):
            await client.aclose()
    return None


async def wait_for_servers(settings: Settings, console: Console, poll_s: float = 0.5) -> None:
    """Return once NATS and Redis both answer; meanwhile say what is missing."""
    said: dict[str, float] = {}
    while True:
        problems = [p for p in (await nats_problem(settings), await redis_problem(settings)) if p]
        if not problems:
            if said:
                console.print("[green]NATS and Redis answer[/green]; starting the services")
                console.file.flush()
            return
        now = time.monotonic()
        for problem in problems:
            key = problem.split(" (")[0]
            if now - said.get(key, -REPEAT_S) >= REPEAT_S:
                said[key] = now
                console.print(f"[yellow]waiting:[/yellow] {problem}", highlight=False, soft_wrap=True)
                console.file.flush()
        await asyncio.sleep(poll_s)
