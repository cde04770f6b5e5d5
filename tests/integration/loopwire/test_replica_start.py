"""Router replicas that start at the same moment (compose and Helm start them together):
both create the shared durable consumers, neither is refused, and both take work."""

from __future__ import annotations

import asyncio

import nats
import pytest

from loopwire.launcher import start_services
from loopwire.settings import Settings
from loopwire.testing.servers import ServerHandle

pytestmark = pytest.mark.integration


async def test_two_routers_starting_together_share_their_consumers(
        nats_server: ServerHandle, redis_server: ServerHandle, prefix: str) -> None:
    settings = Settings(nats_url=nats_server.url, redis_url=redis_server.url, subject_prefix=prefix,
                        metrics_port=0, gc_thresholds="", gc_freeze=False)
    # Both replicas find the consumers missing and create them in the same instant.
    first, second = await asyncio.gather(start_services(["router"], settings),
                                         start_services(["router"], settings))
    try:
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        info = await js.consumer_info(f"LOOPWIRE_INGRESS_{prefix.upper()}", f"{prefix}_router_ingress")
        assert info.config.deliver_subject == f"{prefix}.deliver.{prefix}_router_ingress"
        assert info.config.deliver_group == f"{prefix}_router_ingress"
        await nc.drain()
    finally:
        await asyncio.gather(first.stop(), second.stop())
