"""Upgrades with runs in flight (protocol.md, "Upgrades with runs in flight"): the deployed
layout (one `loopwire serve` per service, two routers) started on one release and rolled
onto the other one process at a time, as the Helm chart rolls (the replacement started
and ready first, then SIGTERM to the old one), while sessions stand at every point a roll
can meet them:

- idle, with history: a follow-up after the roll, and the model sees the old history;
- waiting on an approval opened before the roll and decided after it, holding its
  tenant's one slot while another session of the tenant waits queued for it;
- in the middle of a slow tool call when the tools process is replaced;
- in the middle of a generation when the llm process is replaced.

`upgrade` rolls the previous release (deploy/previous-release, built by
tests/previous_release.py) onto this one; `rollback` this one onto the previous. Both
check that every run completes, no tool call reaches the provider twice, no model call
is made twice, and each session's stored events have strictly increasing seqs with one
`run.started` and one `run.ended` per run."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from loopwire.testing.processes import LoopwireProcess
from tests import previous_release
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import E2E_ENV, connected, serve_tools, wait_for_tools
from .events import SessionEvents, query

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

LIMITS = {"acme": {"max_running": 1, "max_queued": 2}, "*": {}}
GENERATION_S = 4.0
TOOL_S = 5.0
Program = tuple[str, ...] | None
"""How a process runs loopwire: None is this release (LoopwireProcess's default)."""


@pytest.fixture(scope="module")
def previous() -> tuple[str, ...]:
    version, commit = previous_release.named()
    program = (str(previous_release.built(commit)),)
    out = subprocess.run([*program, "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"loopwire {version}", "the previous release's code, not this one's"
    return program


def user_texts(body: dict[str, Any]) -> list[str]:
    texts = []
    for m in body["messages"]:
        if m["role"] != "user":
            continue
        content = m["content"]
        if isinstance(content, str):
            texts.append(content)
        else:
            texts += [b["text"] for b in content if b.get("type") == "text"]
    return texts


def tool_rounds(body: dict[str, Any]) -> int:
    return sum(1 for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
               and any(b.get("type") == "tool_result" for b in m["content"]))


def model(body: dict[str, Any]) -> dict[str, Any] | None:
    """The model of every session here, told apart by the first words of its task."""
    texts = user_texts(body)
    task, last = texts[0], texts[-1]
    if task.startswith("remember plum"):
        if last.startswith("which word"):
            return {"text": "plum" if any("remember plum" in t for t in texts[:-1]) else "what word?"}
        return {"text": "Noted."}
    if task.startswith("approve add"):
        if tool_rounds(body) == 0:
            return {"text": "Adding.", "tool_use": [{"name": "add", "input": {"a": 2, "b": 3}}]}
        return {"text": "The sum is 5."}
    if task.startswith("slow tool"):
        if tool_rounds(body) == 0:
            return {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": "x"}}]}
        return {"text": "Echoed."}
    if task.startswith("queued"):
        return {"text": "Ran after the first."}
    if task.startswith("slow generation"):
        return {"text": "Thought long.", "delay_s": GENERATION_S}
    return None


def requests_for(fake: FakeAnthropic, task: str) -> list[dict[str, Any]]:
    return [r for r in fake.message_requests if user_texts(r)[:1] and user_texts(r)[0].startswith(task)]


class Roll:
    """One system, its processes on `start`, replaced one by one by processes on `to`."""

    def __init__(self, fake: FakeAnthropic, start: Program, to: Program) -> None:
        env = {**E2E_ENV, "ANTHROPIC_BASE_URL": fake.url, "LOOPWIRE_TENANTS": "true",
               "LOOPWIRE_TENANT_LIMITS": json.dumps(LIMITS), "LOOPWIRE_TENANT_SWEEP_S": "1"}
        self.system = LoopwireContainer(env=env, layout="split")
        for process in self.system.processes:
            process.program = start
        self.to = to
        self.exits: list[tuple[str, int, float]] = []

    async def replace(self, service: str) -> None:
        """The first process of `service` not replaced yet: its replacement started and
        ready, then SIGTERM to it, waited for."""
        (old, *_) = [p for p in self.system.of_service(service) if p.program != self.to]
        assert old.proc is not None and (old.program is None or old.proc.args[0] == old.program[0])
        self.system.processes.append(LoopwireProcess(old.command, program=self.to))
        await asyncio.to_thread(self.system.start_loopwire)
        began = time.monotonic()
        code = await asyncio.to_thread(old.terminate, 45.0)
        self.exits.append((old.command, code, time.monotonic() - began))
        assert code == 0, f"`loopwire {old.command}` exited {code}:\n{old.logs()[-3000:]}"
        self.system.processes.remove(old)


@pytest.fixture(params=["upgrade", "rollback"])
def roll(request: pytest.FixtureRequest, fake: FakeAnthropic, previous: tuple[str, ...]) -> Iterator[Roll]:
    start, to = (previous, None) if request.param == "upgrade" else (None, previous)
    fake.responder = model
    r = Roll(fake, start, to)
    with r.system:
        yield r


async def check_stored(nc: NatsClient, sid: str, runs: int) -> None:
    events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs)), f"{sid}: stored seqs not strictly increasing: {seqs}"
    kinds = Counter(e["kind"] for e in events)
    assert kinds["run.started"] == kinds["run.ended"] == runs, f"{sid}: {kinds}"


async def test_a_roll_between_releases_keeps_every_run(roll: Roll, fake: FakeAnthropic) -> None:
    async with connected(roll.system) as nc:
        provider, svc = await serve_tools(nc)
        provider.slow_delay_s = TOOL_S
        await wait_for_tools(nc, {"add", "slow_echo"})
        tag = uuid.uuid4().hex[:8]
        idle, slow_tool, slow_gen = (SessionEvents(nc, f"roll.upg-{tag}-{n}") for n in ("idle", "tool", "gen"))
        approval, queued = (SessionEvents(nc, f"acme.upg-{tag}-{n}") for n in ("approval", "queued"))
        sessions = (idle, approval, queued, slow_tool, slow_gen)
        for ev in sessions:
            await ev.__aenter__()
        try:
            await idle.publish("start", {"input": "remember plum"})
            await idle.wait_for("run.ended", timeout=30)
            await approval.publish("start", {"input": "approve add 2 and 3", "tools": ["add"],
                                             "tool_permissions": {"add": "approve"}})
            asked = await approval.wait_for("approval.requested", timeout=30)
            await queued.publish("start", {"input": "queued behind the approval"})
            await queued.wait_for("run.queued", timeout=30)

            await roll.replace("router")
            await roll.replace("router")
            await slow_gen.publish("start", {"input": "slow generation"})
            await _until(lambda: requests_for(fake, "slow generation"), "the slow generation to reach the model")
            await roll.replace("llm")
            await slow_tool.publish("start", {"input": "slow tool", "tools": ["slow_echo"]})
            await asyncio.wait_for(provider.slow_started.wait(), 30)
            await roll.replace("tools")
            await roll.replace("memory")
            await roll.replace("transcripts")
            assert all(p.program == roll.to for p in roll.system.processes), "every process replaced"

            await approval.publish("decision", {"checkpoint_id": asked["checkpoint_id"], "decision": "approve"})
            await idle.publish("message", {"content": "which word did I ask you to remember?"})
            approved = await approval.wait_for("run.ended", timeout=60)
            after = await queued.wait_for("run.ended", timeout=60)
            followed = await idle.wait_for("run.ended", count=2, timeout=60)
            tooled = await slow_tool.wait_for("run.ended", timeout=60)
            generated = await slow_gen.wait_for("run.ended", timeout=60)
        finally:
            for ev in sessions:
                await ev.__aexit__()
        assert (followed["status"], followed["final_text"]) == ("completed", "plum"), "the model saw the old history"
        assert (approved["status"], approved["final_text"]) == ("completed", "The sum is 5.")
        assert (after["status"], after["final_text"]) == ("completed", "Ran after the first."), \
            "the queued run started when the slot taken before the roll was settled after it"
        usage: dict[str, Any] = {}

        async def settled() -> bool:
            usage.update(await query(nc, "tenant.usage", {"tenant": "acme"}))
            return (usage["running"], usage["queued"]) == (0, 0)

        await _until_async(settled, f"acme's slots and queue to settle (last: {usage})")
        assert (tooled["status"], tooled["final_text"]) == ("completed", "Echoed.")
        assert (generated["status"], generated["final_text"]) == ("completed", "Thought long.")
        ids = Counter(headers.get("Loopwire-Tool-Use-Id") for _name, _body, headers in provider.calls)
        assert sorted(name for name, _b, _h in provider.calls) == ["add", "slow_echo"] and set(ids.values()) == {1}, \
            f"a tool call reached the provider twice: {provider.calls}"
        assert len(requests_for(fake, "slow generation")) == 1, "the generation in flight was asked once"
        for ev, runs in ((idle, 2), (approval, 1), (queued, 1), (slow_tool, 1), (slow_gen, 1)):
            ev.check_bodies()
            ev.check_each_seq_once()
            await check_stored(nc, ev.sid, runs)
        await svc.stop()
    assert len(roll.exits) == 6


async def _until_async(found: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not await found():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        await asyncio.sleep(0.2)


async def _until(found: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not found():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        await asyncio.sleep(0.05)
