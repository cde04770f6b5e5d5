"""pytest fixtures for testing against loopwire.

Enable in your conftest.py with ``pytest_plugins = ["loopwire.testing.pytest_plugin"]``.
Set extra environment for the loopwire process (a fake model server, tool modules) by
overriding the `loopwire_env` fixture.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from loopwire.client import LoopwireClient

from .system import LoopwireContainer


@pytest.fixture
def loopwire_env() -> dict[str, str]:
    """Environment for the loopwire process; override to point it at your fakes."""
    return {}


@pytest.fixture
def loopwire_system(loopwire_env: dict[str, str]) -> Iterator[LoopwireContainer]:
    with LoopwireContainer(env=loopwire_env) as system:
        yield system


@pytest.fixture
async def loopwire_client(loopwire_system: LoopwireContainer) -> AsyncIterator[LoopwireClient]:
    client = await LoopwireClient.connect(loopwire_system.get_nats_url(), loopwire_system.prefix)
    yield client
    await client.close()
