"""Verbs that act on a session through the durable ingress: approve, deny, send, steer,
abort. Each prints what JetStream acknowledged (the input is durably accepted; the
router applies it and reports through the session's events)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from loopwire.settings import Settings

from .connection import cli_settings, client, err_console, fail, publish, request, run_command

SidArg = Annotated[str, typer.Argument(help="Session id.")]


async def open_checkpoint(lw: Any, settings: Settings, sid: str) -> str:
    """The checkpoint the session waits on (`session.get` reports it while
    `awaiting_approval`), or a CliError saying why there is none."""
    session = await request(lw, settings, lw.subjects.query("session.get", lw.tenant), body={"session_id": sid})
    status = session.get("status")
    if status == "unknown":
        fail(f"unknown session {sid!r}")
    checkpoint = session.get("checkpoint_id")
    if status != "awaiting_approval" or not checkpoint:
        fail(f"session {sid!r} has no open checkpoint (status {status})")
    return str(checkpoint)


async def decide(settings: Settings, sid: str, checkpoint: str | None, *, decision: str, note: str | None) -> None:
    async with client(settings) as lw:
        checkpoint = checkpoint or await open_checkpoint(lw, settings, sid)
        body: dict[str, Any] = {"checkpoint_id": checkpoint, "decision": decision}
        if note:
            body["note"] = note
        ack = await publish(lw, settings, sid, verb="decision", body=body)
    err_console.print(f"{decision} sent for checkpoint {checkpoint} of {sid} (ingress seq {ack.get('seq')})",
                      highlight=False)


async def send_input(settings: Settings, sid: str, verb: str, *, body: dict[str, Any], what: str) -> None:
    async with client(settings) as lw:
        ack = await publish(lw, settings, sid, verb=verb, body=body)
    err_console.print(f"{what} sent to {sid} (ingress seq {ack.get('seq')})", highlight=False)


def register(app: typer.Typer) -> None:
    @app.command()
    def approve(sid: SidArg,
                checkpoint: Annotated[str | None, typer.Argument(
                    help="Checkpoint id (default: the session's open one).")] = None,
                note: Annotated[str | None, typer.Option(help="A note for the model.")] = None) -> None:
        """Approve a checkpoint (approval.requested) of a session."""
        run_command(decide(cli_settings(), sid, checkpoint, decision="approve", note=note))

    @app.command()
    def deny(sid: SidArg,
             checkpoint: Annotated[str | None, typer.Argument(
                 help="Checkpoint id (default: the session's open one).")] = None,
             note: Annotated[str | None, typer.Option(help="Why, for the model.")] = None) -> None:
        """Deny a checkpoint (approval.requested) of a session."""
        run_command(decide(cli_settings(), sid, checkpoint, decision="deny", note=note))

    @app.command()
    def send(sid: SidArg, content: Annotated[str, typer.Argument(help="The message.")]) -> None:
        """Send a follow-up message: taken at the run's next boundary, or starts a new run."""
        run_command(send_input(cli_settings(), sid, "message", body={"content": content}, what="message"))

    @app.command()
    def steer(sid: SidArg, content: Annotated[str, typer.Argument(help="The steering message.")]) -> None:
        """Steer the running run: applied at once, even mid-generation or mid-tool."""
        run_command(send_input(cli_settings(), sid, "steer", body={"content": content}, what="steer"))

    @app.command()
    def abort(sid: SidArg,
              reason: Annotated[str, typer.Option(help="Why (run.ended.reason).")] = "aborted from the CLI") -> None:
        """Abort the session's current run (it ends with status `aborted`)."""
        run_command(send_input(cli_settings(), sid, "abort", body={"reason": reason}, what="abort"))
