"""End-to-end fixtures: loopwire as subprocesses (via loopwire.testing, exactly as a
user's suite would use it), a fake Anthropic Messages API in this process, and tool
providers served with nats.micro. Tests drive everything through the public contract with
plain nats-py.

`system` / `own_system` run `loopwire up`; a module that wants its tests on every layout
(`up`, `up --workers 2`, and one `loopwire serve` process per service with two routers:
loopwire.testing.LAYOUTS) sets `system = layout_system` and/or `own_system =
own_layout_system` at its top, and its tests run once per layout."""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import nats
import pytest
from nats import micro
from nats.aio.client import Client as NatsClient
from prometheus_client.parser import text_string_to_metric_families

from loopwire.testing import LAYOUTS, LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

E2E_ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
    "LOOPWIRE_ACK_WAIT_S": "3",
    "LOOPWIRE_DISCOVERY_INTERVAL_S": "0.5",
    "LOOPWIRE_LLM_MAX_RETRIES": "2",
    # Backoff between retries of a failing model: short, so 529 scenarios take ~0.2 s.
    "LOOPWIRE_LLM_RETRY_BASE_DELAY_S": "0.05",
    "LOOPWIRE_LLM_RETRY_MAX_DELAY_S": "0.2",
    "LOOPWIRE_TOOL_TIMEOUT_S": "30",
    "LOOPWIRE_LOG_LEVEL": "INFO",
}


@pytest.fixture(scope="package")
def fake_anthropic() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as server:
        yield server


@pytest.fixture(autouse=True)
def no_request_refused(fake_anthropic: FakeAnthropic) -> Iterator[None]:
    """Every test fails if the fake refused a model request of it as the real API would (a
    malformed history: loopwire/testing/message_rules.py), whatever the test checked."""
    fake_anthropic.take_refused()  # a module fixture's requests before the test are not its own
    yield
    refused = fake_anthropic.take_refused()
    if refused:
        problems = "\n".join(f"- {problem}" for problem, _body in refused)
        pytest.fail(f"the Messages API would have refused {len(refused)} request(s):\n{problems}\n"
                    f"first history: {json.dumps(refused[0][1].get('messages'))[:3000]}")


@contextlib.contextmanager
def started_system(fake_anthropic: FakeAnthropic, layout: str | tuple[str, ...] = "up",
                   servers: dict[str, Any] | None = None, **env: str) -> Iterator[LoopwireContainer]:
    """loopwire in `layout` on its own NATS and Redis (or on the clustered servers in
    `servers`: LoopwireContainer's `redis_cluster`, `redis_sentinel`), talking to the fake
    Messages API; `env` adds to (or overrides) E2E_ENV."""
    with LoopwireContainer(env={**E2E_ENV, "ANTHROPIC_BASE_URL": fake_anthropic.url, **env}, layout=layout,
                           **(servers or {})) as lw:
        yield lw


@contextlib.asynccontextmanager
async def connected(system: LoopwireContainer) -> AsyncIterator[NatsClient]:
    # A cluster's URL lists every node, comma-joined: nats-py takes them as a list.
    client = await nats.connect(servers=system.get_nats_url().split(","))
    try:
        yield client
    finally:
        await client.drain()


@pytest.fixture(scope="package")
def system(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    with started_system(fake_anthropic) as lw:
        yield lw


@pytest.fixture
def own_system(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    """A system of this test's own, for tests that kill or stop loopwire."""
    with started_system(fake_anthropic) as lw:
        yield lw


@pytest.fixture(scope="module", params=list(LAYOUTS))
def layout_system(request: pytest.FixtureRequest, fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    """A system shared by a module's tests, once per layout."""
    with started_system(fake_anthropic, layout=request.param) as lw:
        yield lw


@pytest.fixture(params=list(LAYOUTS))
def own_layout_system(request: pytest.FixtureRequest, fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    """A system of this test's own, once per layout."""
    with started_system(fake_anthropic, layout=request.param) as lw:
        yield lw


@pytest.fixture
def split_system(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    """The deployed layout, of this test's own: one `loopwire serve` per service, two routers."""
    with started_system(fake_anthropic, layout="split") as lw:
        yield lw


@pytest.fixture
async def own_nc(own_system: LoopwireContainer) -> AsyncIterator[NatsClient]:
    async with connected(own_system) as client:
        yield client


@pytest.fixture
def fake(fake_anthropic: FakeAnthropic) -> FakeAnthropic:
    fake_anthropic.reset()
    return fake_anthropic


@pytest.fixture
async def nc(system: LoopwireContainer) -> AsyncIterator[NatsClient]:
    async with connected(system) as client:
        yield client


@dataclass
class ToolProvider:
    """Records what reached the provider: (tool name, input, headers)."""

    calls: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    slow_started: asyncio.Event = field(default_factory=asyncio.Event)
    slow_delay_s: float = 0.0


@pytest.fixture
async def tool_provider(nc: NatsClient) -> AsyncIterator[ToolProvider]:
    """A third-party tool provider on the NATS services protocol: `add` and `slow_echo`."""
    provider, svc = await serve_tools(nc)
    yield provider
    await svc.stop()


@contextlib.asynccontextmanager
async def serving_tools(nc: NatsClient) -> AsyncIterator[ToolProvider]:
    """`serve_tools` on `nc` until the block ends, once the tools service lists them."""
    provider, svc = await serve_tools(nc)
    try:
        await wait_for_tools(nc, {"add", "slow_echo"})
        yield provider
    finally:
        await svc.stop()


async def serve_tools(nc: NatsClient) -> tuple[ToolProvider, Any]:
    provider = ToolProvider()
    svc = await micro.add_service(nc, name="e2e-tools", version="1.0.0", description="tools for the e2e suite")

    async def add(req: micro.Request) -> None:
        body = json.loads(req.data)
        provider.calls.append(("add", body, dict(req.headers or {})))
        await req.respond(json.dumps({"content": str(body["a"] + body["b"]), "is_error": False}).encode())

    async def slow_echo(req: micro.Request) -> None:
        body = json.loads(req.data)
        provider.calls.append(("slow_echo", body, dict(req.headers or {})))
        provider.slow_started.set()
        await asyncio.sleep(provider.slow_delay_s)
        await req.respond(json.dumps({"content": f"echo: {body['text']}", "is_error": False}).encode())

    schema_add = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                  "required": ["a", "b"]}
    schema_echo = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    await svc.add_endpoint(name="add", handler=add, metadata={
        "loopwire.tool": "add", "description": "Add two numbers.", "input_schema": json.dumps(schema_add)})
    await svc.add_endpoint(name="slow_echo", handler=slow_echo, metadata={
        "loopwire.tool": "slow_echo", "description": "Echo text, slowly.", "input_schema": json.dumps(schema_echo)})
    return provider, svc


async def wait_for_tools(nc: NatsClient, names: set[str], prefix: str = "loopwire", timeout: float = 15.0) -> None:
    """Wait until the tools service lists `names` (`<prefix>.api.tools.list`, loopwire's
    addition, docs/protocol.md), so a run does not start before its tools are discovered."""
    deadline = asyncio.get_running_loop().time() + timeout
    known: set[str] = set()
    while asyncio.get_running_loop().time() < deadline:
        try:
            reply = await nc.request(f"{prefix}.api.tools.list", b"{}", timeout=1)
            known = {t["name"] for t in json.loads(reply.data)["tools"]}
            if names <= known:
                return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            pass
        await asyncio.sleep(0.1)
    raise TimeoutError(f"tools {names} not listed after {timeout}s (known: {known})")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample a process serves on /metrics: (name, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def across(system: LoopwireContainer, service: str, name: str, **labels: str) -> list[float]:
    """One sample's value in each process of `service` (0 where it has none yet)."""
    key = (name, tuple(sorted(labels.items())))
    return [scrape(p.metrics_port).get(key, 0.0) for p in system.of_service(service)]
