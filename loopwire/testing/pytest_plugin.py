"""pytest fixtures for testing against loopwire, registered through the `pytest11` entry
point: installing `loopwire[testing]` makes them available, nothing to add to a conftest.

- `fake_anthropic`: a fake Anthropic Messages API (loopwire.testing.fake_anthropic), one
  per test session; script its answers with `fake_anthropic.script("*", [{"text": ...}])`.
- `loopwire_env`: environment for the loopwire processes; by default it points the llm
  service at `fake_anthropic`. Override it to use something else.
- `loopwire_system`: a started LoopwireContainer (NATS, Redis, `loopwire up`).
- `loopwire_client`: a connected `loopwire.Client` (async; needs pytest-asyncio).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from loopwire.typed_client import Client

from .fake_anthropic import FakeAnthropic
from .system import LoopwireContainer

# The conformance suite's checks are plain asserts: rewritten, they say what differed.
pytest.register_assert_rewrite("loopwire.testing.store_conformance")


@pytest.fixture(scope="session")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture
def loopwire_env(fake_anthropic: FakeAnthropic) -> dict[str, str]:
    """Environment for the loopwire process; override to point it at your fakes."""
    return {"ANTHROPIC_BASE_URL": fake_anthropic.url, "ANTHROPIC_API_KEY": "test-key-not-real"}


@pytest.fixture
def loopwire_system(loopwire_env: dict[str, str]) -> Iterator[LoopwireContainer]:
    with LoopwireContainer(env=loopwire_env) as system:
        yield system


@pytest_asyncio.fixture
async def loopwire_client(loopwire_system: LoopwireContainer) -> AsyncIterator[Client]:
    client = await Client.connect(loopwire_system.get_nats_url(), loopwire_system.prefix)
    yield client
    await client.close()
