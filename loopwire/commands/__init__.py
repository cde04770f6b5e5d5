"""The CLI's verbs beyond running services: operate on sessions (approve, deny, send,
steer, abort), read them (sessions, tools, transcript), run one (run), fork and replay
one (fork, replay), delete, erase and export a person's data (delete, erase, export), and the global
options (--nats-url, --version). `loopwire/cli.py` registers them with `register(app)`."""

from __future__ import annotations

import os
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Annotated

import typer


def loopwire_version() -> str:
    try:
        return package_version("loopwire")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"loopwire {loopwire_version()}")
        raise typer.Exit()


def global_options(
    nats_url: Annotated[str | None, typer.Option(
        "--nats-url", help="NATS server URL for this command (else LOOPWIRE_NATS_URL).",
        show_default=False)] = None,
    version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """loopwire: a distributed runtime for LLM agent loops over NATS and Redis."""
    if nats_url:
        # Every command builds its Settings from the environment; this makes the flag
        # win over LOOPWIRE_NATS_URL for it (and for processes it starts, as `up --workers`).
        os.environ["LOOPWIRE_NATS_URL"] = nats_url


def register(app: typer.Typer) -> None:
    from . import erasing, forking, inspect, inspector, operate, run

    app.callback()(global_options)
    run.register(app)
    operate.register(app)
    inspect.register(app)
    inspector.register(app)
    forking.register(app)
    erasing.register(app)
