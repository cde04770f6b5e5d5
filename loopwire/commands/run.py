"""`loopwire run`: start a run and follow it live, answering its approvals inline.

Before publishing, one `session.get` asks whether any loopwire service answers at all:
without it a run published with nothing running would wait for its whole timeout."""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Annotated, Any, Literal, TypedDict, get_args

import nats.errors
import typer
from rich.console import Console

from loopwire.client import LoopwireClient, RunFailedToStart
from loopwire.render import EventRenderer
from loopwire.settings import Settings
from loopwire.shared.contract.events import AnyEvent, RunEndedEvent
from loopwire.shared.contract.protocol import Profile

from .connection import cli_settings, client, err_console, no_services, publish, request, run_command

PROFILES_HELP = f"One of: {', '.join(get_args(Profile))}."


def start_body(prompt: str, profile: str, model: str | None, *, tools: str | None,
               max_turns: int | None, permissions: list[str] | None = None) -> dict[str, Any]:
    start: dict[str, Any] = {"profile": profile, "input": prompt}
    if permissions:
        start["tool_permissions"] = dict(_permission(p) for p in permissions)
    if model:
        start["model"] = {"primary": model}
    if tools is not None:
        start["tools"] = [t.strip() for t in tools.split(",") if t.strip()]
    if max_turns:
        start["limits"] = {"max_turns": max_turns}
    return start


def _permission(text: str) -> tuple[str, str]:
    name, _, level = text.partition("=")
    if not name or level not in ("auto", "approve", "deny"):
        raise typer.BadParameter(f"{text!r}: expected TOOL=auto|approve|deny", param_hint="--permission")
    return name.strip(), level


class Approver:
    """Answers `approval.requested` as it arrives: yes to all (`--approve-all`), or asks
    on the terminal. With no answer possible (stdin closed) it says how to answer later."""

    def __init__(self, lw: LoopwireClient, settings: Settings, sid: str, *, approve_all: bool) -> None:
        self.lw, self.settings, self.sid, self.approve_all = lw, settings, sid, approve_all
        self.stdin_open = True

    async def __call__(self, event: AnyEvent) -> None:
        if event["kind"] != "approval.requested":
            return
        checkpoint = event["checkpoint_id"]
        if self.approve_all:
            await self.decide(checkpoint, "approve", None)
            err_console.print(f"[dim]approved {checkpoint} (--approve-all)[/dim]")
            return
        answer = await self.ask() if self.stdin_open else None
        if answer is None:
            err_console.print(f"[dim]waiting for a decision: loopwire approve {self.sid} "
                              f"(or loopwire deny {self.sid})[/dim]", highlight=False)
            return
        word = answer.strip()
        if word.lower() in ("y", "yes", "a", "approve"):
            await self.decide(checkpoint, "approve", None)
        elif word.lower() in ("n", "no", "d", "deny", ""):
            await self.decide(checkpoint, "deny", None)
        else:
            await self.decide(checkpoint, "deny", word)

    async def ask(self) -> str | None:
        err_console.print("[bold yellow]approve?[/bold yellow] [y]es, [n]o, or a note to deny with: ", end="")
        line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        if not line:
            self.stdin_open = False
            err_console.print()
            return None
        return line

    async def decide(self, checkpoint: str, decision: str, note: str | None) -> None:
        body: dict[str, Any] = {"checkpoint_id": checkpoint, "decision": decision}
        if note:
            body["note"] = note
        await publish(self.lw, self.settings, self.sid, verb="decision", body=body)


class Unfinished(TypedDict):
    """What `follow_run` returns for a run that gave no `run.ended`."""

    status: Literal["rejected", "timeout"]


async def follow_run(settings: Settings, sid: str, start: dict[str, Any], *, json_events: bool, timeout: float,
                     approve_all: bool = False, console: Console | None = None) -> RunEndedEvent | Unfinished:
    """Start a run on `sid` and render it until its `run.ended`, which is returned (a
    refused start or a timeout: `Unfinished`)."""
    renderer = EventRenderer(console or Console(), show_json=json_events)
    async with client(settings) as lw:
        await request(lw, settings, lw.subjects.query("session.get", lw.tenant), body={"session_id": sid}, timeout=3.0)
        approver = Approver(lw, settings, sid, approve_all=approve_all)

        async def on_event(event: AnyEvent) -> None:
            renderer(event)
            await approver(event)

        err_console.print(f"[dim]session {sid}[/dim]", highlight=False)
        try:
            return await lw.run(sid, start, on_event=on_event, timeout=timeout)
        except nats.errors.NoRespondersError:
            no_services(settings, f"no stream captures {lw.subjects.ingress(sid, 'start')}")
        except RunFailedToStart as exc:
            err_console.print(f"[bold red]rejected[/bold red] {exc}", highlight=False)
            return {"status": "rejected"}
        except TimeoutError:
            err_console.print(f"[red]no run.ended within {timeout:g}s[/red]")
            return {"status": "timeout"}


def register(app: typer.Typer) -> None:
    @app.command()
    def run(
        prompt: Annotated[str, typer.Argument(help="What to ask.")],
        profile: Annotated[str, typer.Option(help=PROFILES_HELP)] = "agentic",
        model: Annotated[str | None, typer.Option(help="Primary model id.")] = None,
        *, session: Annotated[str | None, typer.Option(help="Session id (a new one when omitted).")] = None,
        tools: Annotated[str | None, typer.Option(help="Comma-separated tool names (default: all).")] = None,
        max_turns: Annotated[int | None, typer.Option(help="limits.max_turns")] = None,
        permission: Annotated[list[str] | None, typer.Option(
            help="TOOL=auto|approve|deny (tool_permissions; repeatable; within the operator's policy).",
            show_default=False)] = None,
        json_events: Annotated[bool, typer.Option(
            "--json", help="Events as JSON lines: one per line, nothing else on stdout.")] = False,
        approve_all: Annotated[bool, typer.Option(
            "--approve-all", help="Approve every checkpoint without asking.")] = False,
        timeout: Annotated[float, typer.Option(help="Seconds to wait for the run to end.")] = 600.0,
    ) -> None:
        """Start a run and render its events live; approvals are asked for inline."""
        sid = session or f"cli-{uuid.uuid4().hex[:12]}"
        ended = run_command(follow_run(cli_settings(), sid, start_body(prompt, profile, model, tools=tools, max_turns=max_turns, permissions=permission),
                                       json_events=json_events, timeout=timeout, approve_all=approve_all))
        raise typer.Exit(0 if ended.get("status") == "completed" else 1)
