"""Model limits (docs/protocol.md, "Model limits"): LOOPWIRE_MODEL_LIMITS held for the whole
deployment, in the deployed layout with three llm replicas (one `loopwire serve` per
service, two routers), against the fake Messages API through the real Anthropic SDK.

- `max_concurrent: 2`, 12 sessions on a 1 s model: the fake never has more than 2 requests
  in flight, every run completes, each generation that waited says so (`model.throttled`
  before its `generating`), and `session.get` answers `waiting_for_model` meanwhile;
- a 429 with `retry-after: 3`: no request reaches the model from any replica until 3 s have
  passed, no fallback is taken, every run completes;
- tenant A starts 10 sessions, tenant B one a moment later, `max_concurrent: 1`: B's run
  ends before A's fifth;
- kill -9 of the llm replicas holding the whole `max_concurrent`: `limits.usage` (and
  `loopwire limits`) shows it held, then free again within 30 s;
- `rpm: 12`, 20 generations: at most 12 start in any 60 s window, no 429;
- on a Redis Cluster (three masters): `max_concurrent` holds the same.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any

import pytest

from loopwire.testing.redis_cluster import start_redis_cluster
from tests.fakes.anthropic_server import FakeAnthropic

from .cli_driver import on_system
from .conftest import connected, started_system
from .events import SessionEvents

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

THREE_LLMS = ("serve router", "serve router", "serve llm", "serve llm", "serve llm", "serve tools", "serve memory",
              "serve transcripts")


def limits(**entries: dict[str, int]) -> str:
    return json.dumps(entries)


async def query(nc: Any, name: str, body: dict[str, Any]) -> dict[str, Any]:
    reply = await nc.request(f"loopwire.api.{name}", json.dumps(body).encode(), timeout=5)
    return dict(json.loads(reply.data))


async def run_sessions(nc: Any, sids: list[str], *, timeout: float = 120) -> list[SessionEvents]:
    followers = [SessionEvents(nc, sid) for sid in sids]
    for ev in followers:
        await ev.__aenter__()
    await asyncio.gather(*(ev.publish("start", {"input": "hello"}) for ev in followers))
    await asyncio.gather(*(ev.wait_for("run.ended", timeout=timeout) for ev in followers))
    return followers


def kinds(ev: SessionEvents) -> list[str]:
    return [e["kind"] for e in ev.events]


async def test_max_concurrent_holds_across_three_llm_replicas(fake: FakeAnthropic) -> None:
    fake.responder = lambda body: {"text": "Answered after a second.", "delay_s": 1.0}
    with started_system(fake, layout=THREE_LLMS, LOOPWIRE_MODEL_LIMITS=limits(**{"*": {"max_concurrent": 2}})) as system:
        async with connected(system) as nc:
            sids = [f"mc-{uuid.uuid4().hex[:8]}-{n}" for n in range(12)]
            seen_waiting: set[str] = set()

            async def watch() -> None:
                while True:
                    for sid in sids:
                        got = await query(nc, "session.get", {"session_id": sid})
                        if got.get("activity") == "waiting_for_model":
                            seen_waiting.add(sid)
                    await asyncio.sleep(0.2)

            watcher = asyncio.create_task(watch())
            try:
                followers = await run_sessions(nc, sids)
            finally:
                watcher.cancel()
            usage = await query(nc, "limits.usage", {})
    assert len(system.of_service("llm")) == 3
    assert [ev.events[-1]["status"] for ev in followers] == ["completed"] * 12
    assert fake.max_in_flight <= 2, f"{fake.max_in_flight} requests were in flight at once"
    throttled = [ev for ev in followers if "model.throttled" in kinds(ev)]
    assert len(throttled) >= 8, f"only {len(throttled)} of 12 generations waited with 2 slots for 12"
    for ev in throttled:
        ks = kinds(ev)
        assert ks.index("model.throttled") < ks.index("generating"), ks
        first = next(e for e in ev.events if e["kind"] == "model.throttled")
        assert first["reason"] == "concurrency" and first["model"] and first["wait_s"] >= 0
        ev.check_bodies()
    assert "model.fallback" not in sum((kinds(ev) for ev in followers), [])
    assert seen_waiting, "session.get never answered waiting_for_model"
    [entry] = usage["limits"]
    assert entry["key"] == "*" and entry["max_concurrent"] == 2 and entry["in_flight"] == 0
    assert entry["requests_last_60s"] == 12 and entry["waiting"] == 0


async def test_a_429_with_retry_after_pauses_every_replica(fake: FakeAnthropic) -> None:
    fake.responder = lambda body: {"text": "Fine now."}
    fake.fail_next(429, n=1, retry_after=3)
    with started_system(fake, layout=THREE_LLMS, LOOPWIRE_MODEL_LIMITS=limits(**{"*": {}})) as system:
        async with connected(system) as nc:
            first = SessionEvents(nc, f"cd-{uuid.uuid4().hex[:8]}-first")
            await first.__aenter__()
            await first.publish("start", {"input": "hello"})
            await asyncio.to_thread(fake.wait_for_requests, 1, 20.0)
            refused_at = next(r.at for r in fake.requests if r.path == "/v1/messages")
            await asyncio.sleep(0.3)  # the 429 is answered and the cooldown set
            others = await run_sessions(nc, [f"cd-{uuid.uuid4().hex[:8]}-{n}" for n in range(5)])
            await first.wait_for("run.ended", timeout=30)
    followers = [first, *others]
    assert [ev.events[-1]["status"] for ev in followers] == ["completed"] * 6
    arrivals = [r.at for r in fake.requests if r.path == "/v1/messages"]
    assert len(arrivals) == 7  # the refused one, then one per session
    early = [round(at - refused_at, 2) for at in arrivals[1:] if at - refused_at < 2.9]
    assert not early, f"requests reached the model {early} s after its 429 with retry-after: 3"
    everything = sum((kinds(ev) for ev in followers), [])
    assert "model.fallback" not in everything
    cooled = [e for ev in followers for e in ev.events if e["kind"] == "model.throttled"]
    assert cooled and {e["reason"] for e in cooled} == {"cooldown"}


async def test_tenants_take_turns(fake: FakeAnthropic) -> None:
    fake.responder = lambda body: {"text": "One at a time.", "delay_s": 0.5}
    with started_system(fake, layout=THREE_LLMS, LOOPWIRE_TENANTS="true",
                        LOOPWIRE_MODEL_LIMITS=limits(**{"*": {"max_concurrent": 1}})) as system:
        async with connected(system) as nc:
            a = [SessionEvents(nc, f"ta.s{n}-{uuid.uuid4().hex[:6]}") for n in range(10)]
            b = SessionEvents(nc, f"tb.s-{uuid.uuid4().hex[:6]}")
            for ev in [*a, b]:
                await ev.__aenter__()
            await asyncio.gather(*(ev.publish("start", {"input": "hello"}) for ev in a))
            await asyncio.sleep(0.3)
            await b.publish("start", {"input": "hello"})
            ended = await asyncio.gather(*(ev.wait_for("run.ended", timeout=60) for ev in [*a, b]))
    assert [e["status"] for e in ended] == ["completed"] * 11
    a_ends = sorted(e["ts"] for e in ended[:10])
    assert ended[10]["ts"] < a_ends[4], "tenant B's one run waited behind tenant A's backlog"
    assert fake.max_in_flight == 1


async def test_a_killed_replica_gives_its_share_back(fake: FakeAnthropic) -> None:
    # The requests in flight wait until the test ends, then leave the fake at once: a
    # later test counts the fake's requests in flight, and these would be among them.
    held = threading.Event()
    fake.responder = lambda body: (held.wait(120), {"text": "Never seen."})[1]
    try:
        await _killed_replica_gives_its_share_back(fake)
    finally:
        held.set()


async def _killed_replica_gives_its_share_back(fake: FakeAnthropic) -> None:
    with started_system(fake, layout="split", LOOPWIRE_MODEL_LIMITS=limits(**{"*": {"max_concurrent": 2}})) as system:
        async with connected(system) as nc:
            followers = [SessionEvents(nc, f"kl-{uuid.uuid4().hex[:8]}-{n}") for n in range(2)]
            for ev in followers:
                await ev.__aenter__()
                await ev.publish("start", {"input": "hello"})
            await asyncio.to_thread(fake.wait_for_requests, 2, 30.0)
            [held] = (await query(nc, "limits.usage", {"model": "any-model"}))["limits"]
            assert held["in_flight"] == 2
            shown = await on_system(system, "limits", "--json")
            assert shown.code == 0, shown.err
            assert [json.loads(line)["in_flight"] for line in shown.out.splitlines()] == [2]
            table = await on_system(system, "limits")
            assert table.code == 0 and "max_concurrent 2" in table.out, table.out
            system.kill_service("llm")
            killed_at = time.monotonic()
            while True:
                [entry] = (await query(nc, "limits.usage", {}))["limits"]
                if entry["in_flight"] == 0:
                    break
                assert time.monotonic() - killed_at < 35, f"still {entry['in_flight']} in flight"
                await asyncio.sleep(0.5)
    assert time.monotonic() - killed_at <= 32


@pytest.mark.timeout(300)
async def test_rpm_holds_in_every_60s_window(fake: FakeAnthropic) -> None:
    fake.responder = lambda body: {"text": "Counted."}
    with started_system(fake, layout=THREE_LLMS, LOOPWIRE_MODEL_LIMITS=limits(**{"*": {"rpm": 12}})) as system:
        async with connected(system) as nc:
            followers = await run_sessions(nc, [f"rpm-{uuid.uuid4().hex[:8]}-{n}" for n in range(20)], timeout=150)
    assert [ev.events[-1]["status"] for ev in followers] == ["completed"] * 20
    arrivals = sorted(r.at for r in fake.requests if r.path == "/v1/messages")
    assert len(arrivals) == 20
    worst = max(sum(1 for t in arrivals if start <= t < start + 60) for start in arrivals)
    assert worst <= 12, f"{worst} requests started within 60 s"
    assert fake.rate_limited == []
    reasons = {e["reason"] for ev in followers for e in ev.events if e["kind"] == "model.throttled"}
    assert reasons == {"rpm"}


async def test_the_limits_hold_the_same_on_a_redis_cluster(fake: FakeAnthropic) -> None:
    fake.responder = lambda body: {"text": "From the cluster.", "delay_s": 0.5}
    with start_redis_cluster(masters=3, replicas=1) as cluster, started_system(
            fake, layout=THREE_LLMS, servers={"redis_cluster": cluster},
            LOOPWIRE_MODEL_LIMITS=limits(**{"claude-*": {"max_concurrent": 2}, "*": {"rpm": 1000}})) as system:
        async with connected(system) as nc:
            followers = await run_sessions(nc, [f"rc-{uuid.uuid4().hex[:8]}-{n}" for n in range(8)])
            usage = {e["key"]: e for e in (await query(nc, "limits.usage", {}))["limits"]}
    assert [ev.events[-1]["status"] for ev in followers] == ["completed"] * 8
    assert fake.max_in_flight <= 2
    assert any("model.throttled" in kinds(ev) for ev in followers)
    model = next(e["model"] for e in followers[0].events if e["kind"] == "generating")
    counted = "claude-*" if model.startswith("claude-") else "*"
    assert usage[counted]["requests_last_60s"] == 8 and usage[counted]["in_flight"] == 0
