"""The executors' pure parts and the agent's process: what a step tells the agent, and
stopping an agent stops everything it started."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

from loopwire.llm.executors.agent_process import AgentProcess, alive
from loopwire.llm.executors.prompt import EARLIER, new_input
from loopwire.llm.executors.runner import agent_environment

pytestmark = pytest.mark.unit


def user(*texts: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": t} for t in texts]}


def assistant(text: str) -> dict:
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def test_a_new_agent_session_gets_the_input_and_a_resumed_one_only_what_is_new() -> None:
    history = [user("fix the bug")]
    prompt, given = new_input(history, None)
    assert prompt == [{"type": "text", "text": "fix the bug"}] and given == 1
    history += [assistant("Fixed."), user("now add a test", "and docs")]
    prompt, given = new_input(history, 1)
    assert [b["text"] for b in prompt] == ["now add a test", "and docs"] and given == 4


def test_without_the_agents_files_the_conversation_so_far_comes_first() -> None:
    history = [user("my name is Ada"), assistant("Hello Ada."), user("what is my name?")]
    prompt, given = new_input(history, None)  # a new agent session on an old loopwire session
    assert prompt[0]["text"].startswith(EARLIER) and "User: my name is Ada" in prompt[0]["text"]
    assert "Assistant: Hello Ada." in prompt[0]["text"] and prompt[1]["text"] == "what is my name?"
    assert given == 3
    stale, _ = new_input(history, 99)  # a mark past the history: as if new
    assert stale[0]["text"].startswith(EARLIER)


def test_the_agents_environment_holds_none_of_loopwires_settings() -> None:
    env = agent_environment({"PATH": "/bin", "ANTHROPIC_BASE_URL": "http://x", "LOOPWIRE_NATS_PASSWORD": "s3cret",
                             "LOOPWIRE_REDIS_URL": "redis://:pw@h"})
    assert env == {"PATH": "/bin", "ANTHROPIC_BASE_URL": "http://x"}


SCRIPT = """
import os, subprocess, sys, time
# a child in the agent's group, and one that left it (a session of its own)
a = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print(a.pid, b.pid, flush=True)
time.sleep(300)
"""


async def test_stopping_an_agent_stops_its_whole_tree(tmp_path: Path) -> None:
    agent = AgentProcess([sys.executable, "-c", SCRIPT], tmp_path, dict(os.environ))
    await agent.start()
    lines = agent.lines()
    first = await asyncio.wait_for(anext(lines), 30)
    pids = [int(p) for p in first.split()]
    assert agent.pid is not None and all(alive(p) for p in [agent.pid, *pids])
    await agent.stop()
    await asyncio.sleep(0.1)
    assert not any(alive(p) for p in [agent.pid, *pids])
    await lines.aclose()


async def test_an_agent_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    """The llm process killed (here: a stand-in parent), its agent goes too."""
    parent = f"""
import asyncio, os, sys
sys.path[:0] = {sys.path!r}
from pathlib import Path
from loopwire.llm.executors.agent_process import AgentProcess
async def main():
    agent = AgentProcess([sys.executable, "-c", "import time; time.sleep(300)"], Path({str(tmp_path)!r}), dict(os.environ))
    await agent.start()
    print(agent.pid, flush=True)
    await asyncio.sleep(300)
asyncio.run(main())
"""
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", parent, stdout=asyncio.subprocess.PIPE)
    assert proc.stdout is not None
    agent_pid = int(await asyncio.wait_for(proc.stdout.readline(), 30))
    assert alive(agent_pid)
    proc.kill()
    await proc.wait()
    for _ in range(100):
        if not alive(agent_pid):
            break
        await asyncio.sleep(0.05)
    assert not alive(agent_pid)
