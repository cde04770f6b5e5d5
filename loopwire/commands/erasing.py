"""Verbs over a person's data: `delete` (a session out of every store, with the receipt),
`erase --user` (every session of one user) and `export` (a session in one JSON document)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import orjson
import typer

from loopwire.settings import Settings

from .connection import cli_settings, client, err_console, request, run_command, stdout_line

DELETE_TIMEOUT_S = 60.0
ERASE_TIMEOUT_S = 600.0


def _said(receipt: dict[str, Any]) -> str:
    removed = ", ".join(f"{s['store']} {s['removed']}" for s in receipt.get("stores", []) if s.get("removed"))
    what = "deleted" if receipt.get("deleted") else "nothing to delete"
    return f"{receipt.get('session_id')}: {what}{f' ({removed})' if removed else ''}"


async def delete_session(settings: Settings, sid: str, *, as_json: bool) -> None:
    async with client(settings) as lw:
        reply = await request(
            lw,
            settings,
            lw.subjects.query("session.delete", lw.tenant),
            body={"session_id": lw.scoped(sid)},
            timeout=DELETE_TIMEOUT_S,
        )
    if as_json:
        stdout_line(orjson.dumps(reply).decode())
    else:
        err_console.print(_said(reply), highlight=False)


async def erase_user(settings: Settings, user: str, *, as_json: bool) -> None:
    async with client(settings) as lw:
        reply = await request(
            lw,
            settings,
            lw.subjects.query("user.erase", lw.tenant),
            body={"user_id": user},
            timeout=ERASE_TIMEOUT_S,
        )
    if as_json:
        stdout_line(orjson.dumps(reply).decode())
        return
    for receipt in reply.get("sessions", []):
        err_console.print(_said(receipt), highlight=False)
    err_console.print(
        f"user {user}: {sum(1 for r in reply.get('sessions', []) if r.get('deleted'))} session(s) deleted",
        highlight=False,
    )


async def export_session(settings: Settings, sid: str) -> None:
    async with client(settings) as lw:
        reply = await request(
            lw,
            settings,
            lw.subjects.query("session.export", lw.tenant),
            body={"session_id": lw.scoped(sid)},
            timeout=DELETE_TIMEOUT_S,
        )
    stdout_line(orjson.dumps(reply, option=orjson.OPT_INDENT_2).decode())


def register(app: typer.Typer) -> None:
    @app.command()
    def delete(
        sid: Annotated[str, typer.Argument(help="The session to delete.")],
        yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for a confirmation.")] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print the receipt as one JSON line.")] = False,
    ) -> None:
        """Delete a session from every store (a run in progress is aborted first), and say
        what each store removed. Cannot be undone; asks first at a terminal."""
        if (
            not yes
            and not as_json
            and sys.stdin.isatty()
            and not typer.confirm(f"Delete session {sid} everywhere?", err=True, default=True)
        ):
            raise typer.Exit(1)
        run_command(delete_session(cli_settings(), sid, as_json=as_json))

    @app.command()
    def erase(
        user: Annotated[
            str,
            typer.Option(
                "--user",
                metavar="USER_ID",
                help=("The user whose sessions to delete (their runs' StartRun user_id)."),
            ),
        ],
        as_json: Annotated[bool, typer.Option("--json", help="Print the reply as one JSON line.")] = False,
    ) -> None:
        """Delete every session whose runs carried the user id, from every store."""
        run_command(erase_user(cli_settings(), user, as_json=as_json))

    @app.command()
    def export(sid: Annotated[str, typer.Argument(help="The session to export.")]) -> None:
        """Print a session's state and every stored event as one JSON document (large content
        included): `loopwire export SID > file.json`."""
        run_command(export_session(cli_settings(), sid))
