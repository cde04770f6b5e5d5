"""Recorded sessions as regression tests: replay each against a new model or system prompt,
and fail when a run ends differently.

    from loopwire.testing import assert_replay_holds, replay_session

    @pytest.mark.parametrize("sid", ["ticket-17", "ticket-21"])
    async def test_the_new_prompt_resolves_what_the_old_one_did(loopwire_client, sid):
        report = await replay_session(loopwire_client, sid, system=NEW_PROMPT)
        assert_replay_holds(report)

`replay_session` is `loopwire replay` from Python (loopwire/replay/driver.py): a fork of the
session made before its first input, its inputs sent again, its tool calls answered from
the recording by default (`tools="recorded"`: no tool runs, so a replay is repeatable and
free of side effects), and the report of the two sessions side by side. The recorded
sessions are ordinary sessions: record them once on a deployment (or in a test that runs
them against `fake_anthropic`), and replay them wherever their transcripts are.
"""

from __future__ import annotations

from typing import Any

from loopwire.client import LoopwireClient
from loopwire.replay import ReplayReport
from loopwire.replay import replay_session as replay_driver
from loopwire.typed_client import Client


async def replay_session(client: Client | LoopwireClient, session_id: str, *, model: str | None = None,
                         system: str | None = None, tools: str = "recorded", run_timeout: float = 300.0,
                         **options: Any) -> ReplayReport:
    """Replay `session_id` (on `model`, with `system` as the system prompt, when given)
    and compare: `report.differs` is true when a run's status changed; `str(report)` is the
    comparison as `loopwire replay` prints it; `report.to_dict()` as its `--json`."""
    raw = client.raw if isinstance(client, Client) else client
    return await replay_driver(raw, session_id, model=model, system=system, tools=tools,
                               run_timeout=run_timeout, **options)


def assert_replay_holds(report: ReplayReport, *, final_text: bool = False, tool_calls: bool = False) -> None:
    """Fail unless every run of the replay ended with the recorded status (and, when asked,
    the same final text, the same tool calls), with the comparison as the message."""
    problems = [f"run {r.index}: status {(r.source or {}).get('status')} -> {(r.replay or {}).get('status')}"
                for r in report.runs if r.status_differs]
    if final_text:
        problems += [f"run {r.index}: another final text" for r in report.runs if r.text_differs]
    if tool_calls:
        problems += [f"run {r.index}: other tool calls" for r in report.runs if r.tool_calls_differ]
    if problems:
        raise AssertionError("; ".join(problems) + "\n" + str(report))
