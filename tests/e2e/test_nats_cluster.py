"""loopwire on a three-node NATS cluster with replicated streams (R3), in the deployed
layout: one `loopwire serve` process per service, two routers, all six started together
(as Kubernetes starts pods), on one cluster shared by the module's tests, in order:

- (a) runs with tools complete, and every loopwire stream and consumer has 3 replicas;
- (b) kill -9 of the work stream's leader while tools run in several sessions, restarted
  seconds later: every run completes, each transcript's seq strictly increases with one
  run.started and one run.ended, and no tool is called under a second tool-use id;
- (c) a node whose store is wiped rejoins, then a second node is killed: every input
  accepted is applied, the old transcripts still read (from Redis and from the events
  stream), and new runs complete.

Each test prints the recovery it saw (from the kill to each run's next event, by the
events' own timestamps), the figures of docs/deployment.md's failure table.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from functools import partial
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.js.errors import NotFoundError

import loopwire
from loopwire.shared.contract.protocol import EPHEMERAL_KINDS
from loopwire.shared.stores.stream_leader import ask_leader
from loopwire.testing import LoopwireContainer, NatsCluster, start_nats_cluster
from tests.fakes.anthropic_server import FakeAnthropic

from .cli_driver import loopwire_cli
from .conftest import E2E_ENV, ToolProvider, connected, serving_tools
from .events import query

pytestmark = pytest.mark.e2e

STREAMS = ("LOOPWIRE_INGRESS", "LOOPWIRE_WORK", "LOOPWIRE_EVENTS", "LOOPWIRE_DEADLETTERS")


@pytest.fixture(scope="module")
def cluster() -> Iterator[NatsCluster]:
    with start_nats_cluster(3) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def clustered(cluster: NatsCluster, fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    env = {**E2E_ENV, "ANTHROPIC_BASE_URL": fake_anthropic.url}
    with LoopwireContainer(env=env, layout="split", nats_cluster=cluster, ready_timeout=120) as lw:
        yield lw


@pytest.fixture
async def nc(clustered: LoopwireContainer) -> AsyncIterator[NatsClient]:
    async with connected(clustered) as client:
        yield client


@pytest.fixture
async def tools(nc: NatsClient) -> AsyncIterator[ToolProvider]:
    async with serving_tools(nc) as provider:
        yield provider


def script_tool_run(fake: FakeAnthropic, model: str, tool: str, tool_input: dict[str, Any]) -> None:
    """A model of the session's own: one tool call, then an answer (a shared script would
    hand one session's answer to another)."""
    fake.script(model, [{"text": "Calling.", "tool_use": [{"name": tool, "input": tool_input}]},
                        {"text": f"done {model}"}])


async def start(nc: NatsClient, sid: str, model: str, tool: str) -> dict[str, Any]:
    """A `start` published until JetStream acknowledges it (a node may be down)."""
    body = json.dumps({"v": 1, "input": f"use {tool}", "model": {"primary": model}, "tools": [tool]}).encode()
    msg_id = uuid.uuid4().hex
    deadline = time.monotonic() + 30
    while True:
        try:
            ack = await nc.request(f"loopwire.in.{sid}.start", body, timeout=5, headers={"Nats-Msg-Id": msg_id})
            return dict(json.loads(ack.data))
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            if time.monotonic() > deadline:
                raise


async def transcript(nc: NatsClient, sid: str) -> list[dict[str, Any]]:
    """`transcript.get`, asked again while a node is down (no answer, or `unavailable`)."""
    reply: dict[str, Any] = {}
    for _ in range(20):
        try:
            reply = await query(nc, "transcript.get", {"session_id": sid})
            if "events" in reply:
                return list(reply["events"])
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            pass
        await asyncio.sleep(0.25)
    raise TimeoutError(f"transcript.get of {sid} unanswered: {reply}")


async def wait_ended(nc: NatsClient, sids: list[str], timeout: float = 90) -> dict[str, list[dict[str, Any]]]:
    """Each session's transcript once its run ended."""
    deadline = time.monotonic() + timeout
    done: dict[str, list[dict[str, Any]]] = {}
    while len(done) < len(sids):
        for sid in sids:
            if sid not in done:
                events = await transcript(nc, sid)
                if any(e["kind"] == "run.ended" for e in events):
                    done[sid] = events
        if time.monotonic() > deadline:
            raise TimeoutError(f"runs not ended after {timeout}s: {sorted(set(sids) - set(done))}")
        await asyncio.sleep(0.2)
    return done


def check_one_run(sid: str, events: list[dict[str, Any]]) -> None:
    kinds = Counter(e["kind"] for e in events)
    assert kinds["run.started"] == 1 and kinds["run.ended"] == 1, f"{sid}: {kinds}"
    ended = next(e for e in events if e["kind"] == "run.ended")
    assert ended["status"] == "completed", f"{sid}: {ended}"
    seqs = [e["seq"] for e in events]
    assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False)), f"{sid}: seq not strictly increasing: {seqs}"


def tool_use_ids(provider: ToolProvider, tool: str) -> Counter[str]:
    """Session id -> how many distinct tool-use ids the provider was called under."""
    ids: dict[str, set[str]] = {}
    for name, _, headers in provider.calls:
        if name == tool:
            ids.setdefault(headers["Loopwire-Session-Id"], set()).add(headers["Loopwire-Tool-Use-Id"])
    return Counter({sid: len(found) for sid, found in ids.items()})


def resumed(ended: dict[str, list[dict[str, Any]]], moment: float) -> str:
    """How long after `moment` (wall clock) each run still going then made its next
    event, by the events' own `ts`: `fastest-slowest s`."""
    waits = []
    for events in ended.values():
        after = [datetime.fromisoformat(e["ts"]).timestamp() - moment for e in events]
        if any(t > 0 for t in after):  # a run that had ended before is not counted
            waits.append(min(t for t in after if t > 0))
    return f"{min(waits):.1f}-{max(waits):.1f} s ({len(waits)} runs)" if waits else "none"


async def test_runs_complete_and_every_stream_has_three_replicas(
        clustered: LoopwireContainer, cluster: NatsCluster, nc: NatsClient, tools: ToolProvider,
        fake_anthropic: FakeAnthropic) -> None:
    sids = [f"r3-{n}-{uuid.uuid4().hex[:6]}" for n in range(3)]
    for n, sid in enumerate(sids):
        script_tool_run(fake_anthropic, f"m-{sid}", "add", {"a": n, "b": 40})
        await start(nc, sid, f"m-{sid}", "add")
    for sid, events in (await wait_ended(nc, sids)).items():
        check_one_run(sid, events)
        assert [e["content"] for e in events if e["kind"] == "tool.result"] == [str(sids.index(sid) + 40)]

    # The cluster's URL as every client takes it: loopwire.Client, and the CLI's --nats-url.
    async with await loopwire.Client.connect(cluster.url) as client:
        assert (await client.session(sids[0]))["status"] == "idle"
    listed = await loopwire_cli("--nats-url", cluster.url, "sessions", "--json", nats_url="nats://127.0.0.1:1")
    assert listed.code == 0, listed.err
    assert set(sids) <= {json.loads(line)["session_id"] for line in listed.out.splitlines()}

    streams = cluster.streams()
    assert set(STREAMS) <= set(streams), sorted(streams)
    for name in STREAMS:
        info = streams[name]
        assert info["config"]["num_replicas"] == 3, name
        assert len({info["cluster"]["leader"], *(r["name"] for r in info["cluster"]["replicas"])}) == 3, info
    js = nc.jetstream()
    for stream, durable in [("LOOPWIRE_INGRESS", "loopwire_router_ingress"), ("LOOPWIRE_WORK", "loopwire_tools"),
                            ("LOOPWIRE_WORK", "loopwire_llm"), ("LOOPWIRE_DEADLETTERS", "loopwire_router_max_deliveries")]:
        consumer = await js.consumer_info(stream, durable)
        assert consumer.cluster is not None and len(consumer.cluster.replicas or []) == 2, (durable, consumer.cluster)


async def test_kill_9_of_the_work_streams_leader_mid_tool(
        clustered: LoopwireContainer, cluster: NatsCluster, nc: NatsClient,
        fake_anthropic: FakeAnthropic) -> None:
    # The tool provider stays on the nodes that are not killed: a provider cut off from NATS
    # is unavailable by design (a call to a tool without retries then fails), and this test
    # is about the work stream's leader, not the provider's connection.
    leader = cluster.leader_of("LOOPWIRE_WORK")
    provider_nc = await nats.connect(servers=[n.url for n in cluster.nodes if n.name != leader])
    try:
        async with serving_tools(provider_nc) as tools:
            tools.slow_delay_s = 1.5
            sids = [f"kill-{n}-{uuid.uuid4().hex[:6]}" for n in range(6)]
            for sid in sids:
                script_tool_run(fake_anthropic, f"m-{sid}", "slow_echo", {"text": sid})
                await start(nc, sid, f"m-{sid}", "slow_echo")
            deadline = time.monotonic() + 30
            while len({h["Loopwire-Session-Id"] for _, _, h in tools.calls if h.get("Loopwire-Session-Id") in sids}) < 3:
                assert time.monotonic() < deadline, "the tool calls did not start"
                await asyncio.sleep(0.05)
            killed_at, killed_wall = time.monotonic(), time.time()
            cluster.kill(leader)
            new_leader = await asyncio.to_thread(cluster.leader_of, "LOOPWIRE_WORK", 30)
            elected_s = time.monotonic() - killed_at
            await asyncio.sleep(max(0.0, 3.0 - elected_s))
            await asyncio.to_thread(cluster.restart, leader)
            ended = await wait_ended(nc, sids)
            done_s = time.monotonic() - killed_at

            for sid, events in ended.items():
                check_one_run(sid, events)
                assert [e["content"] for e in events if e["kind"] == "tool.result"] == [f"echo: {sid}"], sid
            assert tool_use_ids(tools, "slow_echo") == Counter({sid: 1 for sid in sids}), "a tool called under a second id"
            assert new_leader != leader
            print(f"\n[nats node lost] work stream leader {leader} killed: {new_leader} leads after {elected_s:.1f} s; the "
                  f"runs' next events {resumed(ended, killed_wall)} after the kill (each tool answers within "
                  f"{tools.slow_delay_s} s of it); all {len(sids)} runs ended {done_s:.1f} s after it")
    finally:
        await provider_nc.drain()


async def test_a_wiped_node_rejoins_then_a_second_node_is_lost(
        clustered: LoopwireContainer, cluster: NatsCluster, nc: NatsClient, tools: ToolProvider,
        fake_anthropic: FakeAnthropic) -> None:
    await asyncio.to_thread(cluster.wait_current, 60)
    tools.slow_delay_s = 0.5
    old = [f"old-{n}-{uuid.uuid4().hex[:6]}" for n in range(3)]
    for sid in old:
        script_tool_run(fake_anthropic, f"m-{sid}", "add", {"a": 1, "b": 2})
        await start(nc, sid, f"m-{sid}", "add")
    old_transcripts = await wait_ended(nc, old)

    wiped = cluster.leader_of("LOOPWIRE_INGRESS")
    # Accepted while the node is down and while it catches up from the others.
    during = [f"wipe-{n}-{uuid.uuid4().hex[:6]}" for n in range(4)]
    for sid in during:
        script_tool_run(fake_anthropic, f"m-{sid}", "slow_echo", {"text": sid})
    acks = [await start(nc, during[0], f"m-{during[0]}", "slow_echo")]
    wiped_at = time.monotonic()
    await asyncio.to_thread(cluster.wipe, wiped)
    acks += [await start(nc, sid, f"m-{sid}", "slow_echo") for sid in during[1:]]
    await asyncio.to_thread(cluster.wait_current, 60)
    caught_up_s = time.monotonic() - wiped_at

    second = next(node.name for node in cluster.nodes if node.name != wiped)
    new = [f"new-{n}-{uuid.uuid4().hex[:6]}" for n in range(3)]
    for sid in new:
        script_tool_run(fake_anthropic, f"m-{sid}", "slow_echo", {"text": sid})
    acks.append(await start(nc, new[0], f"m-{new[0]}", "slow_echo"))
    killed_at, killed_wall = time.monotonic(), time.time()
    cluster.kill(second)
    acks += [await start(nc, sid, f"m-{sid}", "slow_echo") for sid in new[1:]]
    ended = await wait_ended(nc, during + new)
    done_s = time.monotonic() - killed_at

    js = nc.jetstream(timeout=10)
    for sid, ack in zip(during + new, acks, strict=True):  # each accepted input is still in the stream
        assert ack.get("stream") == "LOOPWIRE_INGRESS", ack
        assert (await js.get_msg("LOOPWIRE_INGRESS", ack["seq"])).subject == f"loopwire.in.{sid}.start"
    for sid, events in ended.items():
        check_one_run(sid, events)
    assert tool_use_ids(tools, "slow_echo") == Counter({sid: 1 for sid in during + new})
    for sid, before in old_transcripts.items():
        assert await transcript(nc, sid) == before, f"{sid}: its transcript changed"
        archived = [e for e in await archived_events(nc, sid) if e["kind"] not in EPHEMERAL_KINDS]
        assert [e["seq"] for e in archived] == [e["seq"] for e in before], f"{sid}: the events stream lost events"
    print(f"\n[nats node's store lost] {wiped} wiped and restarted: every replica current again after "
          f"{caught_up_s:.1f} s; then {second} killed: the runs' next events {resumed({sid: ended[sid] for sid in new}, killed_wall)} "
          f"after it; all runs ended {done_s:.1f} s after it")


async def archived_events(nc: NatsClient, sid: str) -> list[dict[str, Any]]:
    """The session's events as LOOPWIRE_EVENTS holds them, read from the stream's leader
    one after the other (no consumer to place while a node is down), each seq once."""
    js = nc.jetstream(timeout=10)
    by_seq: dict[int, dict[str, Any]] = {}
    position = 0
    while True:
        try:
            msg = await ask_leader(partial(js.get_msg, "LOOPWIRE_EVENTS", seq=position + 1, next=True,
                                           subject=f"loopwire.out.{sid}.>"), total_s=30)
        except NotFoundError:
            return [by_seq[s] for s in sorted(by_seq)]
        assert msg.seq is not None
        position = msg.seq
        event = json.loads(msg.data)
        by_seq[event["seq"]] = event
