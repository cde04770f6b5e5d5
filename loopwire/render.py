"""Live rendering of a run's events in the terminal (rich)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.text import Text


class EventRenderer:
    """Streams text as it arrives, shows tool calls and results, and a closing line."""

    def __init__(self, console: Console | None = None, show_json: bool = False) -> None:
        self.console = console or Console()
        self.show_json = show_json
        self._in_text = False

    def _end_text(self) -> None:
        if self._in_text:
            self.console.print()
            self._in_text = False

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        c = self.console
        if self.show_json:
            c.print_json(json.dumps(event))
            return
        if kind == "text.delta":
            if not self._in_text:
                c.print(Text("assistant ▸ ", style="bold cyan"), end="")
                self._in_text = True
            c.print(event["text"], end="", markup=False, highlight=False)
            return
        self._end_text()
        if kind == "run.started":
            c.print(f"[dim]run {event['run_id']} started (profile {event['profile']})[/dim]")
        elif kind == "tool.call":
            c.print(Text.assemble(("tool ▸ ", "bold yellow"), (event["name"], "yellow"),
                                  " ", json.dumps(event.get("input", {}))))
        elif kind == "tool.result":
            style = "red" if event.get("is_error") else "green"
            content = event.get("content")
            shown = content if isinstance(content, str) else json.dumps(content)
            if len(shown) > 400:
                shown = shown[:400] + f"… ({len(shown)} chars)"
            c.print(Text.assemble(("result ◂ ", f"bold {style}"), (shown, style)))
        elif kind == "retracted":
            c.print(f"[magenta]↺ turn {event.get('turn')} retracted: {event.get('reason')}[/magenta]")
        elif kind == "model.fallback":
            c.print(f"[magenta]⇄ {event['from_model']} → {event['to_model']} ({event['reason']})[/magenta]")
        elif kind == "loop.detected":
            c.print(f"[magenta]⟳ loop detected: {event['detection']} → {event['escalation']}[/magenta]")
        elif kind == "compaction":
            c.print(f"[dim]context compacted {event['tokens_before']} → {event['tokens_after']} tokens[/dim]")
        elif kind == "approval.requested":
            c.print(f"[bold yellow]approval requested[/bold yellow] checkpoint {event['checkpoint_id']}")
        elif kind == "phase.changed":
            c.print(f"[dim]phase {event['from']} → {event['to']}[/dim]")
        elif kind == "error":
            c.print(f"[bold red]error[/bold red] {event['code']}: {event['message']}")
        elif kind == "run.ended":
            usage = event.get("usage") or {}
            style = "green" if event["status"] == "completed" else "yellow"
            c.print(f"[bold {style}]■ {event['status']}[/bold {style}] after {event['turns']} turn(s), "
                    f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens, "
                    f"${event.get('cost_usd', 0):.6f}")
