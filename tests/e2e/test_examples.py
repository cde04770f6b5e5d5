"""The runnable scripts in examples/, run as a user runs them, against `loopwire up` and
the fake Messages API."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.e2e.cli_driver import cli_env
from tests.e2e.conftest import wait_for_tools
from tests.fakes.anthropic_server import FakeAnthropic

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


async def run_example(system: LoopwireContainer, name: str, *args: str, timeout: float = 60) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / name), *args, "--nats-url", system.get_nats_url(),
        env=cli_env(system.get_nats_url()), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode()


async def test_the_plain_nats_client_runs_a_session(system: LoopwireContainer, fake: FakeAnthropic) -> None:
    fake.script("*", [{"text": "It is 395.", "chunks": ["It is ", "395."]}])
    code, out = await run_example(system, "plain_nats_client.py", "What is 17 * 23 + 4?")
    assert code == 0, out
    assert "accepted: {'stream': 'LOOPWIRE_INGRESS'" in out
    assert "[completed] 'It is 395.'" in out and "session status: idle" in out


async def test_the_tool_provider_serves_a_run_through_the_approval_flow(
        system: LoopwireContainer, nc: NatsClient, fake: FakeAnthropic) -> None:
    provider = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "tool_provider.py"), "--nats-url", system.get_nats_url(),
        env=cli_env(system.get_nats_url()), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    try:
        await wait_for_tools(nc, {"weather"}, timeout=30)
        fake.script("*", [{"text": "Checking.", "tool_use": [{"name": "weather", "input": {"city": "Paris"}}]},
                          {"text": "It is sunny in Paris."}])
        code, out = await run_example(system, "approval_flow.py", "What's the weather in Paris?", "--yes")
    finally:
        provider.terminate()
        provider_out, _ = await asyncio.wait_for(provider.communicate(), 20)
    assert code == 0, out
    assert "approval requested: weather {'city': 'Paris'}" in out and "approved (--yes)" in out
    assert "[result] Sunny, 21 °C in Paris" in out
    assert "[completed] 'It is sunny in Paris.'" in out
    assert provider.returncode == 0, "the provider stops cleanly on SIGTERM"
    assert "weather('Paris') for call toolu_" in provider_out.decode()
    # the tool result reached the model
    assert "Sunny, 21 °C in Paris" in str(fake.message_requests[-1]["messages"][-1])


async def test_the_mcp_client_calls_a_loopwire_tool(system: LoopwireContainer, nc: NatsClient,
                                                     tool_provider: object) -> None:
    await wait_for_tools(nc, {"add"})
    code, out = await run_example(system, "mcp_client.py", "add", '{"a": 20, "b": 22}')
    assert code == 0, out
    assert "tools: " in out and "add" in out.split("tools: ", 1)[1].splitlines()[0]
    assert "add -> 42" in out
