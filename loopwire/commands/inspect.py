"""Verbs that read: sessions, tools, transcript, limits. Readable tables and text by default;
`--json` prints JSON lines (one object per line, nothing else on stdout)."""

from __future__ import annotations

import time
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table

from loopwire.render import EventRenderer, cost_text
from loopwire.settings import Settings

from .connection import cli_settings, client, fail, request, run_command, stdout_line

JsonOpt = Annotated[bool, typer.Option("--json", help="JSON lines: one object per line, nothing else on stdout.")]



async def list_sessions(settings: Settings, status: str | None, limit: int, *, as_json: bool) -> None:
    async with client(settings) as lw:
        body: dict[str, Any] = {"limit": limit}
        if status:
            body["status"] = status
        page = await request(lw, settings, lw.subjects.query("sessions.list", lw.tenant), body=body)
    sessions = page.get("sessions") or []
    if as_json:
        for row in sessions:
            stdout_line(orjson.dumps(row).decode())
        return
    if not sessions:
        Console().print("no sessions" + (f" with status {status}" if status else ""))
        return
    table = Table("session", "status", "phase", "activity", "profile", "turns", "tokens", "cost", "updated")
    for row in sessions:
        usage = row.get("usage") or {}
        tokens = (f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out" if usage else "")
        cost = cost_text(row.get("cost_usd")) if "cost_usd" in row else ""
        table.add_row(str(row.get("session_id")), str(row.get("status")), str(row.get("phase") or ""),
                      str(row.get("activity") or ""), str(row.get("profile") or ""),
                      str(row.get("turns", "")), tokens, cost, str(row.get("updated_at") or ""))
    Console().print(table)


async def list_tools(settings: Settings, as_json: bool) -> None:
    async with client(settings) as lw:
        reply = await request(lw, settings, lw.subjects.tools_list, body={})
    tools = sorted(reply.get("tools") or [], key=lambda t: t.get("name", ""))
    if as_json:
        for tool in tools:
            stdout_line(orjson.dumps(tool).decode())
        return
    if not tools:
        Console().print("no tools known to the tools service")
        return
    table = Table("tool", "source", "description")
    for tool in tools:
        table.add_row(str(tool.get("name")), str(tool.get("source", "")), str(tool.get("description") or ""))
    Console().print(table)


async def list_limits(settings: Settings, model: str | None, *, as_json: bool) -> None:
    async with client(settings) as lw:
        reply = await request(lw, settings, lw.subjects.query("limits.usage"), body={"model": model} if model else {})
    entries = reply.get("limits") or []
    if as_json:
        for entry in entries:
            stdout_line(orjson.dumps(entry).decode())
        return
    if not entries:
        Console().print("no model limits" + (f" for {model}" if model else " (LOOPWIRE_MODEL_LIMITS is not set)"))
        return
    table = Table("key", "in flight", "waiting", "requests/60s", "input tokens/60s", "limits", "cooldown until")
    for entry in entries:
        set_limits = ", ".join(f"{name} {entry[name]}" for name in ("rpm", "input_tpm", "output_tpm", "max_concurrent")
                               if entry.get(name) is not None)
        cooldown = entry.get("cooldown_until")
        table.add_row(str(entry.get("key")), str(entry.get("in_flight")), str(entry.get("waiting")),
                      str(entry.get("requests_last_60s")), str(entry.get("input_tokens_last_60s")),
                      set_limits or "none", time.strftime("%H:%M:%S", time.localtime(cooldown)) if cooldown else "")
    Console().print(table)


async def print_transcript(settings: Settings, sid: str, after_seq: int, *, as_json: bool) -> None:
    renderer = EventRenderer(Console(), show_json=as_json, replay=True)
    shown = 0
    async with client(settings) as lw:
        after = after_seq
        while True:
            page = await request(lw, settings, lw.subjects.query("transcript.get", lw.tenant),
                                 body={"session_id": sid, "after_seq": after, "limit": 1000})
            for event in page.get("events") or []:
                renderer(event)
                shown += 1
            if "next_after_seq" not in page:
                break
            after = page["next_after_seq"]
        if shown == 0 and after_seq == 0:
            session = await request(lw, settings, lw.subjects.query("session.get", lw.tenant), body={"session_id": sid})
            if session.get("status") == "unknown":
                fail(f"unknown session {sid!r}: no transcript")


def register(app: typer.Typer) -> None:
    @app.command()
    def sessions(status: Annotated[str | None, typer.Option(
                     help="Only sessions with this status (idle, queued, running, awaiting_approval).")] = None,
                 limit: Annotated[int, typer.Option(help="At most this many.")] = 100,
                 as_json: JsonOpt = False) -> None:
        """List sessions, most recently updated first, with where each run stands (phase, activity)."""
        run_command(list_sessions(cli_settings(), status, limit, as_json=as_json))

    @app.command()
    def tools(as_json: JsonOpt = False) -> None:
        """List the tools the tools service knows now."""
        run_command(list_tools(cli_settings(), as_json))

    @app.command()
    def limits(model: Annotated[str | None, typer.Option(help="Only the entry this model counts against.")] = None,
               as_json: JsonOpt = False) -> None:
        """Show the model limits (LOOPWIRE_MODEL_LIMITS) and what each entry holds now, fleet-wide."""
        run_command(list_limits(cli_settings(), model, as_json=as_json))

    @app.command()
    def transcript(sid: Annotated[str, typer.Argument(help="Session id.")],
                   after_seq: Annotated[int, typer.Option(help="Only events after this seq.")] = 0,
                   as_json: JsonOpt = False) -> None:
        """Print a session's transcript (every stored event, in seq order)."""
        run_command(print_transcript(cli_settings(), sid, after_seq, as_json=as_json))
