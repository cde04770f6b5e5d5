"""The `loopwire` command (typer + rich).

    loopwire up [--embedded] [--demo]   all five services in one process
    loopwire up --workers N             ... in N processes (loopwire/workers.py)
    loopwire serve NAME                 one service (router, llm, tools, memory, transcripts)
    loopwire run "prompt"               start a run and show its events live
    loopwire approve|deny|send|steer|abort SID ...,  sessions, tools, transcript SID,
             fork SID, replay SID, delete SID, erase --user U,
             export SID > file.json     (loopwire/commands/)
    loopwire mcp [--http PORT]          the tools service's tools as an MCP server (stdio or HTTP)
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import uuid
from typing import Annotated

import typer
from rich.console import Console

from loopwire.commands import register as register_commands
from loopwire.settings import Settings

app = typer.Typer(help="loopwire: a distributed runtime for LLM agent loops over NATS and Redis.",
                  no_args_is_help=True, add_completion=False)
console = Console()
register_commands(app)

DEMO_PROMPT = "What is 17 * 23 + 4? Use the calculator tool."


def _settings() -> Settings:
    """The operator's settings, credentials checked (loopwire/commands/connection.py)."""
    from loopwire.commands.connection import cli_settings

    return cli_settings()


def _setup(settings: Settings, level: str | None = None) -> None:
    try:
        from loopwire.shared.observability.logs import setup_logging

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
    *, worker_index: Annotated[int, typer.Option(hidden=True)] = 0,
    parent_pid: Annotated[int, typer.Option(hidden=True)] = 0,
) -> None:
    """Run all five services in this process (and in N-1 more with --workers N)."""
    from loopwire.launcher import SERVICE_NAMES, serve_until_signal
    from loopwire.shared.runtime.credentials import display_url

    settings = _settings()
    count = settings.workers if workers is None else workers
    if count < 1:
        source = "--workers" if workers is not None else "LOOPWIRE_WORKERS"
        console.print(f"[red]{source} must be at least 1, got {count}[/red]")
        raise typer.Exit(2)
    if worker_index:
        _serve_worker(settings, count, worker_index, parent_pid=parent_pid)
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

    from loopwire.commands.waiting import wait_for_servers

    asyncio.run(wait_for_servers(settings, console))
    try:
        asyncio.run(serve_until_signal(SERVICE_NAMES, settings, after_start,
                                       on_stop=pool.stop if pool is not None else None))
    finally:
        if servers is not None:
            servers.stop()


def _serve_worker(settings: Settings, count: int, index: int, *, parent_pid: int) -> None:
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
def mcp(
    http: Annotated[int | None, typer.Option("--http", metavar="PORT", help=(
        "Serve streamable HTTP on this port (at /mcp) instead of stdio."))] = None,
    host: Annotated[str, typer.Option(help="Address to listen on with --http.")] = "127.0.0.1",
) -> None:
    """Serve the tools the tools service knows (NATS providers, Python tools, MCP servers)
    to MCP clients; calls run through the tools service (docs/tools.md)."""
    from loopwire.commands.connection import client, err_console, run_command
    from loopwire.mcp_serve import serve_http, serve_stdio

    settings = _settings()
    _setup(settings)  # logs go to stderr: on stdio, stdout is the protocol

    async def main() -> None:
        async with client(settings) as lw:
            if http is None:
                await serve_stdio(settings, lw.nc)
            else:
                err_console.print(f"loopwire mcp: http://{host}:{http}/mcp", highlight=False)
                await serve_http(settings, lw.nc, host, port=http)

    run_command(main())


@app.command()
def asyncapi() -> None:
    """Print the AsyncAPI document of the public subjects (docs/asyncapi.json)."""
    from loopwire.asyncapi import asyncapi_json

    sys.stdout.write(asyncapi_json())


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
    from loopwire.commands.run import follow_run

    await follow_run(settings, f"demo-{uuid.uuid4().hex[:8]}", {"input": DEMO_PROMPT, "tools": ["calculator"]},
                     json_events=False, timeout=300, console=console)
    console.rule()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
