"""NATS tool providers (nats.micro) against a real nats-server: discovery, calls, errors,
forgetting, and the catalog published to a real Redis."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import orjson
import pytest
from nats import micro
from nats.aio.client import Client as NatsClient
from nats.micro.request import Request, ServiceError

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall, ToolSpec
from loopwire.shared.stores.step_store import InMemoryStepStore
from loopwire.shared.stores.tool_catalog import read_catalog, read_catalog_entries
from loopwire.testing.servers import ServerHandle
from loopwire.tools.catalog import Catalog
from loopwire.tools.discovery import DiscoveredTool, Discovery
from loopwire.tools.executor import Executor
from loopwire.tools.registry import ToolRegistry

pytestmark = pytest.mark.integration

ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"]}


@pytest.fixture
async def nc(nats_server: ServerHandle) -> AsyncIterator[NatsClient]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.close()


@pytest.fixture
async def provider_nc(nats_server: ServerHandle) -> AsyncIterator[NatsClient]:
    client = await nats.connect(nats_server.url)
    yield client
    await client.close()


class AddProvider:
    """A third-party tool provider: `add` on the services protocol, recording requests."""

    def __init__(self, tool_name: str, subject: str) -> None:
        self.tool_name = tool_name
        self.subject = subject
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.service: Any = None

    async def handle(self, req: Request) -> None:
        body = orjson.loads(req.data)
        self.requests.append((dict(req.headers or {}), body))
        if body.get("a") == 13:
            raise ServiceError("503", "unlucky number")
        if body.get("a") == 666:
            raise RuntimeError("provider bug")
        if body.get("a") == 0:
            await req.respond(orjson.dumps({"content": "zero is not allowed here", "is_error": True}))
            return
        await req.respond(orjson.dumps({"content": str(body["a"] + body["b"]), "is_error": False}))

    async def start(self, nc: NatsClient) -> AddProvider:
        self.service = await micro.add_service(nc, name="adder", version="1.0.0", description="adds")
        await self.service.add_endpoint(
            name="add", subject=self.subject, handler=self.handle,
            metadata={"loopwire.tool": self.tool_name, "description": "Add two numbers.",
                      "input_schema": json.dumps(ADD_SCHEMA)})
        # Measured (nats-py 2.16, nats-server 2.15): without this flush a $SRV.INFO sent
        # right after add_service is answered "no responders" ~10% of the time; in
        # production the next round finds the provider, here a test would flake.
        await nc.flush()
        return self


def discovered(discovery: Discovery, name: str) -> list[DiscoveredTool]:
    return [t for t, _ in discovery.table.tools_by_name().get(name, [])]


async def test_provider_is_discovered_and_called_with_headers(nc: NatsClient, provider_nc: NatsClient,
                                                              prefix: str) -> None:
    provider = await AddProvider(f"add_{prefix}", f"{prefix}.tools.add").start(provider_nc)
    discovery = Discovery(nc, max_misses=2, quiet_s=0.1)
    await discovery.run_round()
    (found,) = discovered(discovery, provider.tool_name)
    assert (found.subject, found.service_name, found.service_id) == (
        provider.subject, "adder", provider.service.id)
    assert found.description == "Add two numbers." and found.input_schema == ADD_SCHEMA

    executor = Executor(Catalog(ToolRegistry(), discovery.table), InMemoryStepStore(), nc, default_timeout_s=5)
    env = ExecuteTools(session_id="sess-1", run_id="r", step_id="r:1:t0", calls=[
        ToolCall(tool_use_id="toolu_1", name=provider.tool_name, input={"a": 1, "b": 2}),
        ToolCall(tool_use_id="toolu_2", name=provider.tool_name, input={"a": "x"}),
        ToolCall(tool_use_id="toolu_3", name=provider.tool_name, input={"a": 0, "b": 1}),
    ])
    ok, invalid, flagged = await executor.execute(env)
    assert (ok.content, ok.is_error) == ("3", False)
    assert invalid.is_error and "invalid input" in str(invalid.content)
    assert (flagged.content, flagged.is_error) == ("zero is not allowed here", True)
    # The invalid call never reached the provider; the others carried both headers.
    assert [body for _, body in provider.requests] == [{"a": 1, "b": 2}, {"a": 0, "b": 1}]
    headers = {h["Loopwire-Tool-Use-Id"]: h for h, _ in provider.requests}
    assert headers["toolu_1"]["Loopwire-Session-Id"] == "sess-1"
    assert set(headers) == {"toolu_1", "toolu_3"}


async def test_service_error_replies_are_error_results(nc: NatsClient, provider_nc: NatsClient,
                                                       prefix: str) -> None:
    provider = await AddProvider(f"add_{prefix}", f"{prefix}.tools.add").start(provider_nc)
    discovery = Discovery(nc, max_misses=2, quiet_s=0.1)
    await discovery.run_round()
    executor = Executor(Catalog(ToolRegistry(), discovery.table), InMemoryStepStore(), nc, default_timeout_s=5)
    env = ExecuteTools(session_id="s", run_id="r", step_id="r:1:t0", calls=[
        ToolCall(tool_use_id="t1", name=provider.tool_name, input={"a": 13, "b": 1}),
        ToolCall(tool_use_id="t2", name=provider.tool_name, input={"a": 666, "b": 1}),
    ])
    declared, crashed = await executor.execute(env)
    assert declared.is_error and declared.content == "unlucky number (code 503)"
    assert crashed.is_error and "provider bug" in str(crashed.content) and "(code 500)" in str(crashed.content)


async def test_stopped_provider_is_forgotten_after_the_misses(nc: NatsClient, provider_nc: NatsClient,
                                                             prefix: str) -> None:
    provider = await AddProvider(f"add_{prefix}", f"{prefix}.tools.add").start(provider_nc)
    second = await AddProvider(provider.tool_name, provider.subject).start(provider_nc)
    discovery = Discovery(nc, max_misses=2, quiet_s=0.1)
    report = await discovery.run_round()
    assert {provider.service.id, second.service.id} <= set(report.added)
    assert len(discovered(discovery, provider.tool_name)) == 2  # two instances, one tool

    catalog = Catalog(ToolRegistry(), discovery.table)
    executor = Executor(catalog, InMemoryStepStore(), nc, default_timeout_s=5)
    await provider.service.stop()
    await second.service.stop()
    # Known but silent: a call now finds nobody listening.
    env = ExecuteTools(session_id="s", run_id="r", step_id="r:1:t0",
                       calls=[ToolCall(tool_use_id="t1", name=provider.tool_name, input={"a": 1, "b": 1})])
    (gone,) = await executor.execute(env)
    assert gone.is_error and "no provider answered" in str(gone.content)

    assert (await discovery.run_round()).forgotten == []  # one miss is not enough
    assert len(discovered(discovery, provider.tool_name)) == 2
    report = await discovery.run_round()
    assert sorted(report.forgotten) == sorted([provider.service.id, second.service.id])
    assert catalog.resolve(provider.tool_name) is None
    env2 = env.model_copy(update={"calls": [ToolCall(tool_use_id="t2", name=provider.tool_name,
                                                     input={"a": 1, "b": 1})]})
    (unknown,) = await executor.execute(env2)
    assert unknown.content == f"unknown tool: {provider.tool_name}"


async def test_catalog_is_published_and_read(nc: NatsClient, provider_nc: NatsClient, prefix: str,
                                             redis_client: Any) -> None:
    provider = await AddProvider(f"add_{prefix}", f"{prefix}.tools.add").start(provider_nc)
    registry = ToolRegistry()

    @registry.tool(exclusive=True)
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    discovery = Discovery(nc, max_misses=1, quiet_s=0.1)
    await discovery.run_round()
    catalog = Catalog(registry, discovery.table)
    await catalog.publish(redis_client, max_age_s=60)

    specs = await read_catalog(redis_client, max_age_s=60)
    assert specs[provider.tool_name] == ToolSpec(name=provider.tool_name, description="Add two numbers.",
                                                 input_schema=ADD_SCHEMA)
    assert specs["shout"].description == "Upper-case a text."
    entries = await read_catalog_entries(redis_client, max_age_s=60)
    assert (entries["shout"].source, entries["shout"].exclusive) == ("python", True)
    assert (entries[provider.tool_name].source, entries[provider.tool_name].exclusive) == ("nats", False)
    assert catalog.specs() == specs

    # Another writer's entry that is too old: readers skip it, the next publish removes it.
    stale = {"name": "ancient", "description": "", "input_schema": {"type": "object"}, "source": "nats",
             "exclusive": False, "seen_at": 1.0}
    await redis_client.hset(keys.TOOL_CATALOG, "ancient", orjson.dumps(stale))
    assert "ancient" not in await read_catalog(redis_client, max_age_s=60)

    # The provider stops and is forgotten: its entry goes with the next publish.
    await provider.service.stop()
    assert (await discovery.run_round()).forgotten == [provider.service.id]
    await catalog.publish(redis_client, max_age_s=60)
    assert set(await redis_client.hkeys(keys.TOOL_CATALOG)) == {b"shout"}
