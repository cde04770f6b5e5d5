"""Rendering of a session's events in the terminal (rich): live, as a run goes, or
replayed from its transcript; or as JSON lines (one event per line on stdout, nothing
else there, so `| jq` works)."""

from __future__ import annotations

import json
import sys
from typing import Any

import orjson
from rich.console import Console
from rich.text import Text

from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.messages import message_text


def cost_text(cost: Any) -> str:
    """`cost_usd` is null when a model has no known price: say so rather than print $0."""
    return "cost unknown" if cost is None else f"${float(cost):.6f}"


class EventRenderer:
    """Streams text as it arrives, shows tool calls and results, and a closing line.
    `replay=True` renders a stored transcript, which has `message` and `user.message`
    events instead of the (ephemeral) text deltas."""

    def __init__(self, console: Console | None = None, show_json: bool = False, replay: bool = False) -> None:
        self.console = console or Console()
        self.show_json = show_json
        self.replay = replay
        self._in_text = False

    def _end_text(self) -> None:
        if self._in_text:
            self.console.print()
            self._in_text = False

    def __call__(self, event: AnyEvent) -> None:
        c = self.console
        if self.show_json:
            sys.stdout.write(orjson.dumps(event).decode() + "\n")
            sys.stdout.flush()
            return
        if event["kind"] == "text.delta":
            if not self._in_text:
                c.print(Text("assistant ▸ ", style="bold cyan"), end="")
                self._in_text = True
            c.print(event["text"], end="", markup=False, highlight=False)
            return
        self._end_text()
        if self.replay and event["kind"] == "message":
            text = message_text(event.get("message"))
            if text:
                c.print(Text.assemble(("assistant ▸ ", "bold cyan"), text))
        elif self.replay and event["kind"] == "user.message":
            text = message_text(event.get("message"))
            if text:
                c.print(Text.assemble((f"{event.get('source', 'user')} ▸ ", "bold"), text))
        elif event["kind"] == "run.queued":
            c.print(f"[dim]run {event['run_id']} queued: place {event['position']} in its tenant's queue[/dim]")
        elif event["kind"] == "run.started":
            c.print(f"[dim]run {event['run_id']} started (profile {event['profile']})[/dim]")
        elif event["kind"] == "tool.call":
            c.print(Text.assemble(("tool ▸ ", "bold yellow"), (event["name"], "yellow"),
                                  " ", json.dumps(event.get("input", {}))))
        elif event["kind"] == "tool.result":
            style = "red" if event.get("is_error") else "green"
            content = event.get("content")
            shown = content if isinstance(content, str) else json.dumps(content)
            if len(shown) > 400:
                shown = shown[:400] + f"… ({len(shown)} chars)"
            c.print(Text.assemble(("result ◂ ", f"bold {style}"), (shown, style)))
        elif event["kind"] == "retracted":
            c.print(f"[magenta]↺ turn {event.get('turn')} retracted: {event.get('reason')}[/magenta]")
        elif event["kind"] == "model.fallback":
            c.print(f"[magenta]⇄ {event['from_model']} → {event['to_model']} ({event['reason']})[/magenta]")
        elif event["kind"] == "loop.detected":
            c.print(f"[magenta]⟳ loop detected: {event['detection']} → {event['escalation']}[/magenta]")
        elif event["kind"] == "steering":
            why = f" ({event['reason']})" if event.get("reason") else ""
            c.print(f"[magenta]↪ steering: {event.get('source')}{why}[/magenta]", highlight=False)
        elif event["kind"] == "compaction":
            c.print(f"[dim]context compacted {event['tokens_before']} → {event['tokens_after']} tokens[/dim]")
        elif event["kind"] == "approval.requested":
            c.print(f"[bold yellow]approval requested[/bold yellow] checkpoint {event['checkpoint_id']}")
            for call in event.get("tool_calls") or []:
                c.print(Text.assemble("  wants to call ", (str(call.get("name")), "yellow"), " ",
                                      json.dumps(call.get("input", {}))))
            if event.get("proposal") is not None:
                c.print(Text.assemble("  proposes: ", str(event["proposal"])))
        elif event["kind"] == "approval.decided":
            c.print(f"[yellow]decision[/yellow] {event.get('decision')} checkpoint {event.get('checkpoint_id')}",
                    highlight=False)
        elif event["kind"] == "session.forked":
            c.print(f"[dim]forked from {event.get('from_session_id')} at seq {event.get('from_seq')}"
                    f" ({event.get('messages', 0)} messages)[/dim]", highlight=False)
        elif event["kind"] == "warning":
            c.print(f"[yellow]warning[/yellow] {event.get('code')}: {event.get('message')}", highlight=False)
        elif event["kind"] == "budget.warning":
            c.print(f"[yellow]budget[/yellow] {event.get('limit')} at {float(event.get('pct', 0)):.0%}")
        elif event["kind"] == "phase.changed":
            c.print(f"[dim]phase {event['from']} → {event['to']}[/dim]")
        elif event["kind"] == "error":
            c.print(f"[bold red]error[/bold red] {event['code']}: {event['message']}")
        elif event["kind"] == "run.ended":
            usage = event.get("usage") or {}
            style = "green" if event["status"] == "completed" else "yellow"
            c.print(f"[bold {style}]■ {event['status']}[/bold {style}] after {event['turns']} turn(s), "
                    f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens, "
                    f"{cost_text(event.get('cost_usd'))}")
