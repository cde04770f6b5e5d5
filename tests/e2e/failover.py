"""What the failover tests share (test_redis_cluster.py, test_redis_sentinel.py): sessions
that each call one slow tool, and the checks that a failover lost no run and repeated no
call."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import nats
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import ToolProvider, connected, serve_tools, wait_for_tools
from .events import query


def _first_user_text(body: dict[str, Any]) -> str:
    content = body["messages"][0]["content"]
    return content if isinstance(content, str) else next(b["text"] for b in content if b.get("type") == "text")


def echo_each_session(fake: FakeAnthropic) -> None:
    """Each session's model calls `slow_echo` once, then answers; the call's id is the
    session's own (`toolu_<sid>`), so a generation asked again asks for the same call."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        sid = _first_user_text(body).removeprefix("echo ")
        last = body["messages"][-1]["content"]
        if isinstance(last, list) and any(b.get("type") == "tool_result" for b in last):
            return {"text": f"done {sid}"}
        return {"text": "Echoing.", "tool_use": [{"name": "slow_echo", "input": {"text": sid}, "id": f"toolu_{sid}"}]}

    fake.responder = respond


async def failover_mid_tool(system: LoopwireContainer, fake: FakeAnthropic, sids: list[str],
                            fail: Callable[[], Awaitable[float]]) -> tuple[float, float]:
    """Runs on `sids` each in a 3 s tool call when `fail()` breaks Redis (and returns the
    seconds its failover took): every run completes, no call twice. (failover s, seconds
    from the failure until every run ended)."""
    async with connected(system) as nc:
        provider, svc = await serve_tools(nc)
        provider.slow_delay_s = 3.0
        await wait_for_tools(nc, {"slow_echo"})
        echo_each_session(fake)
        runs = asyncio.create_task(run_sessions(nc, sids, timeout=150))
        await asyncio.wait_for(provider.slow_started.wait(), 60)
        await asyncio.sleep(0.5)  # more calls under way
        failed_at = time.monotonic()
        failover_s = await fail()
        provider.slow_delay_s = 0.1
        await runs
        recovered_s = time.monotonic() - failed_at
        await transcripts_hold(nc, sids, provider)
        await svc.stop()
    return failover_s, recovered_s


async def run_sessions(nc: NatsClient, sids: list[str], timeout: float) -> None:
    """Start a run on each session (`echo <sid>`) and wait until each has its `run.ended`
    (polled from the transcript: queries may fail while Redis fails over)."""
    for sid in sids:
        ack = await nc.request(f"loopwire.in.{sid}.start",
                               json.dumps({"input": f"echo {sid}", "tools": ["slow_echo"]}).encode(), timeout=10,
                               headers={"Nats-Msg-Id": uuid.uuid4().hex})
        assert json.loads(ack.data).get("stream") == "LOOPWIRE_INGRESS"
    await asyncio.gather(*(_ended(nc, sid, timeout) for sid in sids))


async def _ended(nc: NatsClient, sid: str, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    kinds: list[str] = []
    while asyncio.get_running_loop().time() < deadline:
        try:
            events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
            kinds = [e["kind"] for e in events]
            if "run.ended" in kinds:
                return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError, KeyError):
            pass
        await asyncio.sleep(0.5)
    raise TimeoutError(f"session {sid}: no run.ended in {timeout}s; events: {kinds}")


async def transcripts_hold(nc: NatsClient, sids: list[str], provider: ToolProvider) -> None:
    """Every run completed with its one tool call, made once: the provider saw each
    session's call id exactly once; each transcript has one run.started and one run.ended,
    its seqs strictly increasing."""
    calls = Counter(headers["Loopwire-Tool-Use-Id"] for name, _, headers in provider.calls if name == "slow_echo")
    for sid in sids:
        assert calls[f"toolu_{sid}"] == 1, f"{sid}: its call was made {calls[f'toolu_{sid}']} times"
        events = (await query(nc, "transcript.get", {"session_id": sid}))["events"]
        kinds = Counter(e["kind"] for e in events)
        assert (kinds["run.started"], kinds["run.ended"], kinds["tool.result"]) == (1, 1, 1), (sid, kinds)
        ended = next(e for e in events if e["kind"] == "run.ended")
        assert ended["status"] == "completed" and ended["final_text"] == f"done {sid}", (sid, ended)
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs)), f"{sid}: seqs {seqs}"
    assert sum(calls[f"toolu_{sid}"] for sid in sids) == len(sids)
