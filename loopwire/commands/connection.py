"""How the CLI reaches NATS: one short attempt, one clear line when it fails.

The services reconnect for as long as it takes (an outage must not lose work); a person
at a terminal wants the opposite: within a few seconds either a connection or a sentence
saying what did not answer, and a non-zero exit. nats-py tries a server again after
`reconnect_time_wait` until `max_reconnect_attempts` is passed, and reports each failure
through `error_cb` (which logs a traceback by default): both are set here so one refused
connection gives one line.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import nats
import nats.errors
from rich.console import Console

from loopwire.client import LoopwireClient
from loopwire.settings import Settings

CONNECT_TIMEOUT_S = 2.0
"""Per attempt; a whole connect (two attempts per server) stays within a few seconds."""

err_console = Console(stderr=True)


class CliError(Exception):
    """A failure the CLI reports as one line on stderr and a non-zero exit (no traceback)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def fail(message: str, code: int = 1) -> NoReturn:
    raise CliError(message, code)


def cli_settings() -> Settings:
    """The operator's settings, with the NATS and Redis credentials checked (one way of
    authenticating, files that exist): a clear message and exit 2 instead of a traceback.
    Every configured secret is masked in what this process prints from here on."""
    import typer

    from loopwire.shared.runtime.credentials import (
        CredentialsError,
        nats_security,
        redis_connect_options,
        redis_topology,
        register_configured_secrets,
    )

    settings = Settings()
    try:
        nats_security(settings)
        redis_connect_options(settings)
        redis_topology(settings)
    except (CredentialsError, OSError) as exc:
        err_console.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    register_configured_secrets(settings)
    return settings


async def connect_nats(settings: Settings, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """A nats-py connection for a command, with the operator's credentials and TLS (the
    services' own, shared/runtime/credentials.py), or CliError naming the URL that did not answer."""
    from loopwire.shared.runtime.credentials import display_url, nats_connect_options

    options = nats_connect_options(settings)
    if settings.tenant:  # deploy/nats/tenants.conf gives each tenant's user only its own reply inbox
        options["inbox_prefix"] = f"_INBOX_{settings.tenant}"
    urls = options["servers"]
    shown = display_url(settings.nats_url)
    seen: list[Exception] = []

    async def remember(exc: Exception) -> None:
        # Instead of nats-py's default, which logs every failed attempt with a traceback.
        seen.append(exc)

    try:
        nc = await asyncio.wait_for(nats.connect(
            **options, connect_timeout=timeout, max_reconnect_attempts=1, reconnect_time_wait=0.2,
            allow_reconnect=False, error_cb=remember), timeout=2 * timeout * len(urls) + 1)
    except nats.errors.NoServersError:
        fail(f"cannot reach NATS at {shown}" + (f" ({_short(seen[-1])})" if seen else ""))
    except (TimeoutError, OSError, nats.errors.Error) as exc:
        fail(f"cannot reach NATS at {shown} ({_short(seen[-1] if seen else exc)})")
    # Connected: from now on ride out a server restart as nats-py does by default (it
    # reads these options at each reconnect), so a long `run` survives one.
    nc.options["allow_reconnect"] = True
    nc.options["max_reconnect_attempts"] = 60
    nc.options["reconnect_time_wait"] = 2
    return nc


def _short(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


@contextlib.asynccontextmanager
async def client(settings: Settings) -> AsyncIterator[LoopwireClient]:
    nc = await connect_nats(settings)
    lw = LoopwireClient(nc, settings.subject_prefix, own_connection=True, tenant=settings.tenant)
    try:
        yield lw
    finally:
        with contextlib.suppress(Exception):
            await lw.close()


def no_services(settings: Settings, what: str) -> NoReturn:
    from loopwire.shared.runtime.credentials import display_url

    fail(f"no loopwire services answer at {display_url(settings.nats_url)} ({what}); is `loopwire up` running?")


async def request(lw: LoopwireClient, settings: Settings, subject: str, *, body: dict[str, Any],
                  timeout: float = 5.0) -> dict[str, Any]:
    """A query of the public contract; no responders or no reply in time is said as such."""
    import orjson

    try:
        reply = await lw.nc.request(subject, orjson.dumps(body), timeout=timeout)
    except nats.errors.NoRespondersError:
        no_services(settings, f"nothing serves {subject}")
    except nats.errors.TimeoutError:
        no_services(settings, f"no reply on {subject} within {timeout:g}s")
    data: dict[str, Any] = orjson.loads(reply.data)
    if isinstance(data, dict) and "error" in data:
        error = data["error"]
        fail(f"{error.get('code')}: {error.get('message')}")
    return data


async def publish(lw: LoopwireClient, settings: Settings, sid: str, *, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    """Publish to the durable ingress and wait for JetStream's acknowledgement."""
    import uuid

    try:
        return await lw.publish(sid, verb, {"v": 1, **body}, msg_id=uuid.uuid4().hex)
    except nats.errors.NoRespondersError:
        no_services(settings, f"no stream captures {lw.subjects.ingress(sid, verb)}")
    except nats.errors.TimeoutError:
        no_services(settings, f"no acknowledgement for {lw.subjects.ingress(sid, verb)}")


def run_command(coro: Any) -> Any:
    """Run a command's coroutine; a CliError becomes one line on stderr and its exit code."""
    import typer

    try:
        return asyncio.run(coro)
    except CliError as exc:
        err_console.print(f"[red]error:[/red] {exc}", markup=True, highlight=False, soft_wrap=True)
        raise typer.Exit(exc.code) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def stdout_line(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
