"""Streams and consumers on a three-node NATS cluster (shared/runtime/streams.py), and the
cluster handle of loopwire.testing that makes the failures (nats_cluster.py).

Six replicas that start together all come up with the same R3 streams and consumers; a
stream made earlier with one replica is brought to three; three replicas asked of a
single server stop the start-up at once, saying why. The handle kills, restarts and
wipes nodes and finds leaders, and a wiped node catches up from the others.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from functools import partial

import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats.js.api import ConsumerConfig, StreamConfig

from loopwire.settings import Settings
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.streams import (
    StreamSetupError,
    ensure_streams,
    stream_configs,
    until_jetstream_answers,
)
from loopwire.shared.runtime.work_consumer import JetStreamRoot, WorkConsumer
from loopwire.testing import NatsCluster, start_nats_cluster
from loopwire.testing.servers import ServerHandle

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster() -> Iterator[NatsCluster]:
    with start_nats_cluster(3) as nodes:
        yield nodes


@pytest.fixture
async def nc(cluster: NatsCluster) -> AsyncIterator[NatsClient]:
    client = await nats.connect(servers=cluster.urls)
    yield client
    await client.drain()


def work_stream(settings: Settings) -> str:
    return next(c.name for c in stream_configs(settings) if c.name and c.name.startswith("LOOPWIRE_WORK"))


def tools_consumer(settings: Settings) -> WorkConsumer:
    """The tools service's work consumer, as ServiceContext.work_subscriber makes it."""
    subjects = Subjects(settings.subject_prefix)
    durable = f"{settings.subject_prefix}_tools"

    async def handle(root: JetStreamRoot) -> None:
        await root.ack()

    return WorkConsumer(subjects.tools_execute, stream=work_stream(settings), durable=durable, handle=handle,
                        config=ConsumerConfig(ack_wait=settings.ack_wait_s, max_deliver=5, max_ack_pending=10_000,
                                              deliver_subject=subjects.deliver(durable)))


async def start_together(nc: NatsClient, settings: Settings, replicas: int = 6) -> None:
    """What `replicas` processes starting at once do: make the streams, bind the consumer
    (ServiceContext.consume), both retried while JetStream does not answer."""
    async def one() -> WorkConsumer:
        js = nc.jetstream(timeout=settings.jetstream_timeout_s)
        await ensure_streams(js, settings)
        consumer = tools_consumer(settings)
        await until_jetstream_answers("consumer", partial(consumer.start, js), time.monotonic() + 60)
        return consumer
    started = await asyncio.gather(*(one() for _ in range(replicas)))
    await asyncio.gather(*(consumer.stop(1.0) for consumer in started))


async def test_six_replicas_starting_together_make_r3_streams_and_consumers(
        nc: NatsClient, cluster: NatsCluster, prefix: str) -> None:
    settings = Settings(subject_prefix=prefix, stream_replicas=3)
    await start_together(nc, settings)
    js = nc.jetstream()
    for cfg in stream_configs(settings):
        assert cfg.name is not None
        info = await js.stream_info(cfg.name)
        assert info.config.num_replicas == 3 and info.cluster is not None
        assert len(info.cluster.replicas or []) == 2, (cfg.name, info.cluster)
    consumer = await js.consumer_info(work_stream(settings), f"{prefix}_tools")
    assert consumer.config.deliver_group == f"{prefix}_tools"
    assert consumer.cluster is not None and len(consumer.cluster.replicas or []) == 2


async def test_a_stream_made_with_one_replica_is_brought_to_three(nc: NatsClient, prefix: str) -> None:
    one = Settings(subject_prefix=prefix, stream_replicas=1)
    await start_together(nc, one, replicas=1)
    js = nc.jetstream()
    assert (await js.stream_info(work_stream(one))).config.num_replicas == 1
    await start_together(nc, Settings(subject_prefix=prefix, stream_replicas=3))
    for cfg in stream_configs(one):
        assert cfg.name is not None
        assert (await js.stream_info(cfg.name)).config.num_replicas == 3, cfg.name
    deadline = time.monotonic() + 15
    while True:  # a consumer follows its stream's replicas once they are placed
        cluster = (await js.consumer_info(work_stream(one), f"{prefix}_tools")).cluster
        if cluster is not None and len(cluster.replicas or []) == 2:
            break
        assert time.monotonic() < deadline, cluster
        await asyncio.sleep(0.2)


async def test_three_replicas_on_one_server_stop_the_start_up_saying_why(
        nats_server: ServerHandle, prefix: str) -> None:
    client = await nats.connect(nats_server.url)
    try:
        started = time.monotonic()
        with pytest.raises(StreamSetupError, match="LOOPWIRE_STREAM_REPLICAS=3, but NATS is one server"):
            await ensure_streams(client.jetstream(), Settings(subject_prefix=prefix, stream_replicas=3))
        assert time.monotonic() - started < 5, "not retried: it can never succeed"
    finally:
        await client.drain()


async def test_the_handle_kills_restarts_and_wipes_nodes(cluster: NatsCluster, nc: NatsClient, prefix: str) -> None:
    js = nc.jetstream(timeout=10)
    name = f"HANDLE_{prefix.upper()}"
    await js.add_stream(StreamConfig(name=name, subjects=[f"{prefix}.h"], num_replicas=3))
    for n in range(20):
        await js.publish(f"{prefix}.h", str(n).encode())
    leader = cluster.leader_of(name)
    cluster.kill(leader)
    assert not cluster.node(leader).running
    assert await asyncio.to_thread(cluster.leader_of, name, 30) != leader
    await asyncio.to_thread(cluster.restart, leader)
    other = next(node.name for node in cluster.nodes if node.name != cluster.leader_of(name))
    await asyncio.to_thread(cluster.wipe, other)
    await asyncio.to_thread(cluster.wait_current, 60, streams=[name])
    own = cluster.node(other).monitor("/jsz?acc=$G&streams=true")[1]
    held = {s["name"]: s["state"]["messages"] for acc in own["account_details"] for s in acc["stream_detail"]}
    assert held[name] == 20, "the wiped node caught up from the others"
    assert cluster.url == ",".join(node.url for node in cluster.nodes)
    await js.delete_stream(name)
