"""The `loopwire` command (typer + rich).

    loopwire up [--embedded] [--demo]   all five services in one process
    loopwire up --workers N             ... in N processes (loopwire/workers.py)
    loopwire serve NAME                 one service (router, llm, tools, memory, transcripts)
    loopwire run "prompt"               start a run and show its events live
    loopwire transcript SID             print a session's transcript
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import uuid
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from rich.console import Console

from loopwire.shared.contract import Profile
from loopwire.shared.settings import Settings

if TYPE_CHECKING:
    from loopwire.client import LoopwireClient

app = typer.Typer(help="loopwire: a distributed runtime for LLM agent loops over NATS and Redis.",
                  no_args_is_help=True, add_completion=False)
console = Console()

DEMO_PROMPT = "What is 17 * 23 + 4? Use the calculator tool."
PROFILE_NAMES = ", ".join(get_args(Profile))


def _settings() -> Settings:
    """The operator's settings, with the NATS and Redis credentials checked (one way of
    authenticating, files that exist): a clear message and exit 2 instead of a traceback.
    Every configured secret is masked in what this process prints from here on."""
    from loopwire.shared.credentials import (
        CredentialsError,
        nats_security,
        redis_connect_options,
        register_configured_secrets,
    )

    settings = Settings()
    try:
        nats_security(settings)
        redis_connect_options(settings)
    except (CredentialsError, OSError) as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    register_configured_secrets(settings)
    return settings


def _setup(settings: Settings, level: str | None = None) -> None:
    try:
        from loopwire.shared.logs import setup_logging

        setup_logging(level or settings.log_level, json=settings.log_json)
    except ImportError:  # pragma: no cover - logs module always ships
        logging.basicConfig(level=level or settings.log_level)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - not on Windows
        pass


@app.command()
def up(
    embedded: Annotated[bool, typer.Option(help="Start nats-server and redis-server from the pip "
                                                 "packages when none answers.")] = False,
    demo: Annotated[bool, typer.Option(help="Run the demo session once the services are up.")] = False,
    workers: Annotated[int | None, typer.Option(
        help="Processes to run, each with all five services (default: LOOPWIRE_WORKERS, 1); "
             "worker i serves /metrics on LOOPWIRE_METRICS_PORT + i.", show_default=False)] = None,
    # Set by the parent of `--workers N` on the processes it starts (loopwire/workers.py).
    worker_index: Annotated[int, typer.Option(hidden=True)] = 0,
    parent_pid: Annotated[int, typer.Option(hidden=True)] = 0,
) -> None:
    """Run all five services in this process (and in N-1 more with --workers N)."""
    from loopwire.launcher import SERVICE_NAMES, serve_until_signal
    from loopwire.shared.credentials import display_url

    settings = _settings()
    count = settings.workers if workers is None else workers
    if count < 1:
        source = "--workers" if workers is not None else "LOOPWIRE_WORKERS"
        console.print(f"[red]{source} must be at least 1, got {count}[/red]")
        raise typer.Exit(2)
    if worker_index:
        _serve_worker(settings, count, worker_index, parent_pid)
        return
    log_level = "WARNING" if demo else settings.log_level
    _setup(settings, log_level)
    if demo and "loopwire.demo.tools" not in settings.tool_modules:
        settings.tool_modules = [*settings.tool_modules, "loopwire.demo.tools"]
    pool = None
    if count > 1:
        from loopwire.workers import WorkerPool, child_env

        pool = WorkerPool(count, env=child_env(settings, log_level))
    servers = None
    if embedded:
        from loopwire.embedded import ensure_servers

        servers = ensure_servers(settings.nats_url, settings.redis_url, settings.data_dir)
        for line in servers.started:
            console.print(f"[dim]started {line}[/dim]")

    async def after_start(running: object) -> None:
        port = settings.metrics_port
        if pool is not None:
            from loopwire.workers import describe_ports

            pool.start()
            where = f"; {count} workers, {describe_ports(port, count)}"
            logging.getLogger("loopwire.workers").info("%d workers (pids %s); %s", count, ", ".join(
                map(str, [os.getpid(), *pool.pids()])), describe_ports(port, count))
        else:
            where = f"; metrics on :{port}/metrics" if port else ""
        # Never the URLs as given: they may hold a password or a token.
        console.print(f"[green]loopwire up[/green]: router, llm, tools, memory, transcripts on "
                      f"{display_url(settings.nats_url)} / {display_url(settings.redis_url)}{where}")
        if demo:
            await _demo(settings)
            console.print("[dim]services keep running; publish to loopwire.in.<sid>.start, "
                          "or press Ctrl-C to stop[/dim]")

    try:
        asyncio.run(serve_until_signal(SERVICE_NAMES, settings, after_start,
                                       on_stop=pool.stop if pool is not None else None))
    finally:
        if servers is not None:
            servers.stop()


def _serve_worker(settings: Settings, count: int, index: int, parent_pid: int) -> None:
    """Worker `index` (>= 1) of `loopwire up --workers count`, started by worker 0."""
    from loopwire.launcher import SERVICE_NAMES, serve_until_signal
    from loopwire.workers import die_with_parent, metrics_port

    _setup(settings)
    if parent_pid:
        die_with_parent(parent_pid)
    settings.metrics_port = metrics_port(settings.metrics_port, index)

    async def after_start(running: object) -> None:
        logging.getLogger("loopwire.workers").info(
            "worker %d of %d up (pid %d)%s", index, count, os.getpid(),
            f"; metrics on :{settings.metrics_port}" if settings.metrics_port else "")

    asyncio.run(serve_until_signal(SERVICE_NAMES, settings, after_start))


@app.command()
def serve(name: Annotated[str, typer.Argument(help="router, llm, tools, memory or transcripts")]) -> None:
    """Run one service."""
    from loopwire.launcher import SERVICE_NAMES, serve_until_signal

    if name not in SERVICE_NAMES:
        console.print(f"[red]unknown service {name!r}[/red]; choose from {', '.join(SERVICE_NAMES)}")
        raise typer.Exit(2)
    settings = _settings()
    _setup(settings)
    asyncio.run(serve_until_signal([name], settings))


@app.command()
def run(
    prompt: Annotated[str, typer.Argument(help="What to ask.")],
    profile: Annotated[str, typer.Option(help=f"One of: {PROFILE_NAMES}.")] = "agentic",
    model: Annotated[str | None, typer.Option(help="Primary model id.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id (a new one when omitted).")] = None,
    tools: Annotated[str | None, typer.Option(help="Comma-separated tool names (default: all).")] = None,
    max_turns: Annotated[int | None, typer.Option(help="limits.max_turns")] = None,
    json_events: Annotated[bool, typer.Option("--json", help="Print raw events as JSON.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the run to end.")] = 600.0,
) -> None:
    """Start a run and render its events live."""
    settings = _settings()
    start: dict[str, object] = {"profile": profile, "input": prompt}
    if model:
        start["model"] = {"primary": model}
    if tools is not None:
        start["tools"] = [t.strip() for t in tools.split(",") if t.strip()]
    if max_turns:
        start["limits"] = {"max_turns": max_turns}
    sid = session or f"cli-{uuid.uuid4().hex[:12]}"
    ended = asyncio.run(_run(settings, sid, start, json_events, timeout))
    raise typer.Exit(0 if ended.get("status") == "completed" else 1)


@app.command()
def transcript(
    sid: Annotated[str, typer.Argument(help="Session id.")],
    after_seq: Annotated[int, typer.Option(help="Only events after this seq.")] = 0,
) -> None:
    """Print a session's transcript (every stored event, in seq order)."""

    settings = _settings()

    async def main() -> None:
        async with await _connect(settings) as lw:
            after = after_seq
            while True:
                page = await lw.transcript_get(sid, after_seq=after)
                if "error" in page:
                    console.print(f"[red]{page['error']['code']}: {page['error']['message']}[/red]")
                    raise typer.Exit(1)
                for event in page["events"]:
                    sys.stdout.write(json.dumps(event) + "\n")
                if "next_after_seq" not in page:
                    break
                after = page["next_after_seq"]

    asyncio.run(main())


@app.command()
def asyncapi() -> None:
    """Print the AsyncAPI document of the public subjects (docs/asyncapi.json)."""
    from loopwire.asyncapi import asyncapi_json

    sys.stdout.write(asyncapi_json())


async def _connect(settings: Settings) -> LoopwireClient:
    """The CLI's connection, with the operator's credentials and TLS (the services' own,
    shared/credentials.py). A server that refuses or does not answer ends the command
    within seconds with a short message, not a minute of retries and a traceback."""
    from loopwire.client import LoopwireClient
    from loopwire.shared.credentials import display_url

    errors: list[str] = []

    async def remember(exc: Exception) -> None:
        errors.append(str(exc) or type(exc).__name__)

    try:
        client = await LoopwireClient.from_settings(settings, connect_timeout=2, max_reconnect_attempts=2,
                                                    reconnect_time_wait=0.5, error_cb=remember)
    except Exception as exc:
        cause = errors[-1] if errors else (str(exc) or type(exc).__name__)
        console.print(f"[red]cannot connect to NATS at {display_url(settings.nats_url)}: {cause}[/red]")
        raise typer.Exit(1) from None
    # Connected: a later outage is ridden out as nats-py does by default (it reads its
    # options at each reconnect), so a long `run` survives a server restart.
    client.nc.options["max_reconnect_attempts"] = 60
    client.nc.options["reconnect_time_wait"] = 2
    return client


async def _run(settings: Settings, sid: str, start: dict[str, object], json_events: bool,
               timeout: float) -> dict[str, object]:
    from loopwire.client import RunFailedToStart
    from loopwire.render import EventRenderer

    renderer = EventRenderer(console, show_json=json_events)
    async with await _connect(settings) as lw:
        console.print(f"[dim]session {sid}[/dim]")
        try:
            return await lw.run(sid, start, on_event=renderer, timeout=timeout)
        except RunFailedToStart as exc:
            console.print(f"[bold red]rejected[/bold red] {exc}")
            return {"status": "rejected"}
        except TimeoutError:
            console.print(f"[red]no run.ended within {timeout}s[/red]")
            return {"status": "timeout"}


async def _demo(settings: Settings) -> None:
    from loopwire.llm.providers import provider_description, resolve_provider

    which = resolve_provider(settings)
    if which == "scripted":
        console.rule("[bold]demo[/bold] — offline: the scripted model (no ANTHROPIC_API_KEY set)")
        console.print("[yellow]No ANTHROPIC_API_KEY: the answers come from loopwire's deterministic scripted "
                      "model, not from Claude.[/yellow]")
    else:
        console.rule(f"[bold]demo[/bold] — {provider_description(settings)}")
    console.print(f"[bold]user ▸[/bold] {DEMO_PROMPT}")
    await _run(settings, f"demo-{uuid.uuid4().hex[:8]}", {"input": DEMO_PROMPT, "tools": ["calculator"]},
               json_events=False, timeout=300)
    console.rule()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
