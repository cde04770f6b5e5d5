"""A NATS connection to the session's nats-server, for the runtime's tests over a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import nats
import pytest

from loopwire.testing.servers import ServerHandle


@pytest.fixture
async def nc(nats_server: ServerHandle) -> AsyncIterator[nats.NATS]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.drain()
