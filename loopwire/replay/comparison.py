"""Two sessions compared run by run: a recorded session and its replay (driver.py).

For each run, side by side: status, final text (a diff when they differ), tool calls,
turns, tokens and cost. A replay `differs` when a run's status differs, or when one
session has a run the other has not: that is what fails a regression check (the exit
status of `loopwire replay`); other differences are shown, not judged.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from loopwire.render import cost_text

from .recording import RunRecord, run_summary


def call_text(call: dict[str, Any]) -> str:
    import orjson

    return f"{call.get('name')}({orjson.dumps(call.get('input') or {}, option=orjson.OPT_SORT_KEYS).decode()})"


@dataclass
class RunComparison:
    index: int
    source: dict[str, Any] | None
    replay: dict[str, Any] | None

    @property
    def status_differs(self) -> bool:
        return (self.source or {}).get("status") != (self.replay or {}).get("status")

    @property
    def text_differs(self) -> bool:
        return (self.source or {}).get("final_text") != (self.replay or {}).get("final_text")

    @property
    def tool_calls_differ(self) -> bool:
        return [call_text(c) for c in (self.source or {}).get("tool_calls", [])] != \
            [call_text(c) for c in (self.replay or {}).get("tool_calls", [])]

    def text_diff(self) -> list[str]:
        """The final texts' unified diff, line by line (empty when they are the same)."""
        if not self.text_differs:
            return []
        before = ((self.source or {}).get("final_text") or "").splitlines()
        after = ((self.replay or {}).get("final_text") or "").splitlines()
        return list(difflib.unified_diff(before, after, "recorded", "replay", lineterm="", n=2))

    def to_dict(self) -> dict[str, Any]:
        return {"run": self.index, "source": self.source, "replay": self.replay,
                "status_differs": self.status_differs, "text_differs": self.text_differs,
                "tool_calls_differ": self.tool_calls_differ, "text_diff": self.text_diff()}


@dataclass
class ReplayReport:
    source_session: str
    replay_session: str
    tools: str
    model: str | None = None
    system_changed: bool = False
    runs: list[RunComparison] = field(default_factory=list)
    not_sent: list[dict[str, Any]] = field(default_factory=list)
    """Recorded inputs the replay could not send at their point (its run ended before)."""

    @property
    def differs(self) -> bool:
        """A run's status differs (or one session has a run the other has not)."""
        return any(r.status_differs for r in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {"source_session": self.source_session, "replay_session": self.replay_session,
                "tools": self.tools, "model": self.model, "system_changed": self.system_changed,
                "differs": self.differs, "runs": [r.to_dict() for r in self.runs], "not_sent": self.not_sent}

    def render(self, console: Console) -> None:
        console.print(self.renderable())

    def renderable(self) -> Group:
        head = Text.assemble(("replay ", "bold"), f"{self.replay_session} of {self.source_session}",
                             f" · tools {self.tools}", f" · model {self.model}" if self.model else "",
                             " · new system prompt" if self.system_changed else "")
        parts: list[Any] = [head]
        for run in self.runs:
            parts.append(_run_table(run))
            diff = run.text_diff()
            if diff:
                parts.append(Text("\n".join(diff), style="yellow"))
        for skipped in self.not_sent:
            parts.append(Text(f"not sent: {skipped['verb']} of run {skipped['run']} after {skipped['after_turns']} "
                              "turns (the replay's run ended before)", style="dim"))
        verdict = "the replay differs: a run's status changed" if self.differs else "same statuses in every run"
        parts.append(Text(verdict, style="red bold" if self.differs else "green"))
        return Group(*parts)

    def __str__(self) -> str:
        console = Console(width=120, record=True, color_system=None, force_terminal=False)
        with console.capture() as captured:
            self.render(console)
        return captured.get()


def _cell(summary: dict[str, Any] | None, what: str) -> str:
    if summary is None:
        return "—"
    if what == "tokens":
        return f"{summary.get('input_tokens') or 0} in / {summary.get('output_tokens') or 0} out"
    if what == "cost":
        return cost_text(summary.get("cost_usd"))
    if what == "tool calls":
        calls = [call_text(c) for c in summary.get("tool_calls", [])]
        return "\n".join(calls) if calls else "none"
    if what == "models":
        return ", ".join(summary.get("models") or []) or "—"
    if what == "final text":
        text = summary.get("final_text") or ""
        return text if len(text) <= 400 else text[:400] + "…"
    return str(summary.get(what, ""))


def _run_table(run: RunComparison) -> Table:
    table = Table(title=f"run {run.index}", title_justify="left", show_lines=False)
    table.add_column("")
    table.add_column("recorded", overflow="fold")
    table.add_column("replay", overflow="fold")
    table.add_column("")
    marks = {"status": run.status_differs, "final text": run.text_differs, "tool calls": run.tool_calls_differ}
    for what in ("status", "final text", "tool calls", "turns", "tokens", "cost", "models"):
        differs = marks.get(what, _cell(run.source, what) != _cell(run.replay, what))
        table.add_row(what, _cell(run.source, what), _cell(run.replay, what), "≠" if differs else "")
    return table


def compare(source: list[RunRecord], replay: list[RunRecord], **report: Any) -> ReplayReport:
    """The report of a replay: run i of each session side by side."""
    out = ReplayReport(**report)
    for n in range(max(len(source), len(replay))):
        out.runs.append(RunComparison(index=n + 1, source=run_summary(source[n]) if n < len(source) else None,
                                      replay=run_summary(replay[n]) if n < len(replay) else None))
    return out
