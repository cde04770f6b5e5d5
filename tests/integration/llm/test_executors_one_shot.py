"""What the one-process-per-prompt agents (codex, opencode) share, with a scripted stand-in
for the CLI (a Python script writing `codex exec --json` lines): a steer stops the process
and continues the agent's session with the new message; Codex's missing turn limit is
kept by stopping it; a process that ends without an answer is a clear failure. The real
CLIs: tests/integration/llm/test_executors_cli_agents.py."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from loopwire.llm.executors.base import ExecutorFailed, ExecutorTask, Finished, TextDelta, ToolCall
from loopwire.llm.executors.codex import CodexExecutor
from loopwire.llm.executors.one_shot import IMAGE_NOTE, prompt_text
from loopwire.settings import Settings

pytestmark = pytest.mark.integration

# Answers like `codex exec --json`: a new thread that works until stopped (or, with SLEEPY
# unset in its prompt, answers), `resume T` answering with the prompt it got; with "LOOP"
# in the prompt it calls a command in every model call and never stops by itself.
FAKE_CODEX = r'''
import json, sys, time
argv = sys.argv[1:]
prompt = sys.stdin.read().strip()
with open(sys.argv[0] + ".calls", "a") as log:
    log.write(json.dumps({"argv": argv, "prompt": prompt}) + "\n")
def out(line):
    print(json.dumps(line), flush=True)
if "EMPTY" in prompt:
    print("boom", file=sys.stderr, flush=True)
    sys.exit(3)
resumed = "resume" in argv
thread = argv[argv.index("resume") + 1] if resumed else "T-1"
out({"type": "thread.started", "thread_id": thread})
out({"type": "turn.started"})
if "LOOP" in prompt:
    for i in range(50):
        out({"type": "item.started", "item": {"id": f"item_{i}", "type": "command_execution", "command": "true"}})
        out({"type": "item.completed", "item": {"id": f"item_{i}", "type": "command_execution", "command": "true",
                                                "aggregated_output": "", "exit_code": 0, "status": "completed"}})
        time.sleep(0.05)
if "SLEEPY" in prompt and not resumed:
    time.sleep(60)
out({"type": "item.completed", "item": {"id": "item_x", "type": "agent_message", "text": f"got: {prompt}"}})
out({"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 2}})
'''


@pytest.fixture
def codex(tmp_path: Path) -> tuple[CodexExecutor, Path]:
    script = tmp_path / "fake_codex.py"
    script.write_text(FAKE_CODEX)
    return CodexExecutor(Settings(executor_dir=str(tmp_path / "x")), [sys.executable, str(script)]), script


def task(tmp_path: Path, text: str, **over: object) -> ExecutorTask:
    fields: dict[str, object] = dict(session_id="s", run_id="r", step_id="s:1", turn=1, profile="codex", model="m",
                                     prompt=[{"type": "text", "text": text}], cwd=tmp_path, env={"PATH": "/usr/bin"})
    fields.update(over)
    return ExecutorTask(**fields)  # type: ignore[arg-type]


def calls(script: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in Path(f"{script}.calls").read_text().splitlines()]


async def test_a_steer_stops_the_process_and_resumes_the_thread_with_the_message(
        tmp_path: Path, codex: tuple[CodexExecutor, Path]) -> None:
    executor, script = codex
    run = await executor.start(task(tmp_path, "SLEEPY start"))
    events = []
    async with asyncio.timeout(30):
        async for event in run.events():
            events.append(event)
            if len(events) == 1:  # the thread is known: steer the running turn
                await run.steer([{"type": "text", "text": "go left instead"}])
    await run.aclose()
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.text == "got: go left instead"
    assert finished.agent_session == "T-1"
    first, second = calls(script)
    assert "resume" not in first["argv"]
    assert second["argv"][-3:] == ["resume", "T-1", "-"] and second["prompt"] == "go left instead"


async def test_codex_is_stopped_at_max_turns(tmp_path: Path, codex: tuple[CodexExecutor, Path]) -> None:
    executor, _ = codex
    run = await executor.start(task(tmp_path, "LOOP", max_turns=3))
    async with asyncio.timeout(30):
        events = [e async for e in run.events()]
    await run.aclose()
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.stop_reason == "max_turns" and finished.turns == 3
    assert len([e for e in events if isinstance(e, ToolCall)]) == 3  # the fourth call was not waited for


async def test_an_agent_that_ends_without_an_answer_fails_clearly(tmp_path: Path,
                                                                  codex: tuple[CodexExecutor, Path]) -> None:
    executor, _ = codex
    run = await executor.start(task(tmp_path, "EMPTY"))
    with pytest.raises(ExecutorFailed) as failure:
        async with asyncio.timeout(30):
            async for _ in run.events():
                pass
    await run.aclose()
    assert failure.value.code == "executor_failed"
    assert "exit 3" in failure.value.message and "boom" in failure.value.message


async def test_a_plain_answer(tmp_path: Path, codex: tuple[CodexExecutor, Path]) -> None:
    executor, script = codex
    run = await executor.start(task(tmp_path, "hello", prompt=[
        {"type": "text", "text": "hello"}, {"type": "image", "source": {"type": "base64", "data": "AA=="}}]))
    async with asyncio.timeout(30):
        events = [e async for e in run.events()]
    await run.aclose()
    assert [e.text for e in events if isinstance(e, TextDelta)] == [f"got: hello\n\n{IMAGE_NOTE}"]
    assert calls(script)[0]["prompt"] == f"hello\n\n{IMAGE_NOTE}"


def test_prompt_text_keeps_the_text_in_order() -> None:
    assert prompt_text([{"type": "text", "text": "a"}, {"type": "tool_result"}, {"type": "text", "text": "b"}]) == "a\n\nb"
