"""`loopwire ui`: the session inspector, a web page on LOOPWIRE_UI_PORT (loopwire/ui/)."""

from __future__ import annotations

from typing import Annotated

import typer

from .connection import cli_settings, err_console, run_command


def register(app: typer.Typer) -> None:
    @app.command()
    def ui(port: Annotated[int | None, typer.Option(help="Port (default: LOOPWIRE_UI_PORT, 8765).",
                                                    show_default=False)] = None,
           host: Annotated[str | None, typer.Option(help="Address (default: LOOPWIRE_UI_HOST, 127.0.0.1).",
                                                    show_default=False)] = None) -> None:
        """Serve the session inspector: sessions, live timelines, approvals, message / steer / abort,
        each run's waterfall, fork at an event, replay and compare."""
        from loopwire.ui.app import serve

        settings = cli_settings()
        err_console.print(f"session inspector on http://{host or settings.ui_host}:{port or settings.ui_port}/ "
                          "(Ctrl-C stops it)", highlight=False)
        run_command(serve(settings, port=port, host=host))
