"""Verbs over a session's past: `fork` (a new session from one at an event) and `replay`
(its inputs again, on a fork, against another model or system prompt, compared)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console

from loopwire.replay import ReplayError, replay_session
from loopwire.settings import Settings

from .connection import cli_settings, client, err_console, fail, request, run_command, stdout_line


async def fork_session(settings: Settings, sid: str, at: int | None, *, new: str | None, tools: str,
                       as_json: bool) -> None:
    new_sid = new or f"{sid.rpartition('.')[2][:100]}-fork-{uuid.uuid4().hex[:8]}"
    body: dict[str, Any] = {"session_id": sid, "new_session_id": new_sid, "tools": tools}
    if at is not None:
        body["at_seq"] = at
    async with client(settings) as lw:
        reply = await request(lw, settings, lw.subjects.query("session.fork", lw.tenant),
                              body={**body, "session_id": lw.scoped(sid), "new_session_id": lw.scoped(new_sid)})
    if as_json:
        stdout_line(orjson.dumps(reply).decode())
        return
    origin = reply["forked_from"]
    cut = reply.get("cut_seq")
    inside = f" (cut at the last complete turn, seq {cut})" if cut is not None and cut != origin["seq"] else ""
    stdout_line(reply["session_id"])
    err_console.print(f"forked {origin['session_id']} at seq {origin['seq']}{inside}: {reply.get('messages', 0)} "
                      f"messages; `loopwire send {reply['session_id']} ...` continues it", highlight=False)


async def replay(settings: Settings, sid: str, model: str | None, *, prompt: str | None, tools: str,
                 as_json: bool, timeout: float) -> int:
    async with client(settings) as lw:
        if not as_json:
            err_console.print(f"replaying {sid} (tools {tools}{f', model {model}' if model else ''})…", highlight=False)
        try:
            report = await replay_session(lw, sid, model=model, system=prompt, tools=tools, run_timeout=timeout)
        except ReplayError as exc:
            fail(str(exc))
        except TimeoutError:
            fail(f"a run of the replay did not end within {timeout:g}s")
    if as_json:
        stdout_line(orjson.dumps(report.to_dict()).decode())
    else:
        report.render(Console())
    return 1 if report.differs else 0


def register(app: typer.Typer) -> None:
    @app.command()
    def fork(sid: Annotated[str, typer.Argument(help="The session to fork.")],
             at: Annotated[int | None, typer.Option("--at", metavar="SEQ", help=(
                 "The event to fork at (inside a run: its last complete turn before it); "
                 "default: the last event."), show_default=False)] = None,
             new: Annotated[str | None, typer.Option("--as", metavar="NEW", help=(
                 "The new session's id (default: <sid>-fork-<random>)."), show_default=False)] = None,
             *, tools: Annotated[str, typer.Option(help=(
                 "live: the fork's tools run for real; recorded: answered from the session's recorded "
                 "results."))] = "live",
             as_json: Annotated[bool, typer.Option("--json", help="Print the reply as one JSON line.")] = False
             ) -> None:
        """Fork a session at an event: a new idle session with its history as it stood there.
        Prints the new session's id."""
        if tools not in ("live", "recorded"):
            err_console.print("[red]error:[/red] --tools is live or recorded")
            raise typer.Exit(2)
        run_command(fork_session(cli_settings(), sid, at, new=new, tools=tools, as_json=as_json))

    @app.command(name="replay")
    def replay_command(
            sid: Annotated[str, typer.Argument(help="The recorded session to replay.")],
            model: Annotated[str | None, typer.Option(help="Run the replay on this model (no fallbacks).",
                                                      show_default=False)] = None,
            system: Annotated[Path | None, typer.Option(metavar="FILE", help=(
                "A file whose text replaces the runs' system prompt."), exists=True, dir_okay=False,
                show_default=False)] = None,
            *, tools: Annotated[str, typer.Option(help=(
                "recorded: tool calls answered from the recording (matched by name and input), no "
                "tool runs; live: tools run for real under the operator's policy."))] = "recorded",
            as_json: Annotated[bool, typer.Option("--json", help="The comparison as one JSON document.")] = False,
            timeout: Annotated[float, typer.Option(help="Seconds each run of the replay may take.")] = 300.0,
    ) -> None:
        """Replay a session's inputs on a fork made before its first input and compare the two,
        run by run. Exits 1 when a run's status differs."""
        if tools not in ("live", "recorded"):
            err_console.print("[red]error:[/red] --tools is recorded or live")
            raise typer.Exit(2)
        prompt = system.read_text() if system is not None else None
        code = run_command(replay(cli_settings(), sid, model, prompt=prompt, tools=tools, as_json=as_json, timeout=timeout))
        raise typer.Exit(code)
