"""Secrets never leave: an API key, a NATS password and a Redis password, each a unique
marker, given to `loopwire up` the way operators do (the passwords inside the URLs, as
the old banner printed them), then a session with a tool call, a model error that is
retried, a bad request and a rejected body — and every output is searched for the markers:
stdout and stderr of `loopwire up` at DEBUG with spans printed (console exporter, content
capture on), every event, every Redis key and value, every message of every JetStream
stream."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import nats
import pytest
import redis.asyncio as aioredis
from nats.js.errors import NotFoundError

from loopwire.testing import LoopwireContainer
from loopwire.testing.servers import start_nats, start_redis
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import E2E_ENV
from .events import SessionEvents

pytestmark = pytest.mark.e2e

USERS_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "users.conf"
API_KEY = "marker-api-key-" + uuid.uuid4().hex
NATS_PASSWORD = "marker-nats-pw-" + uuid.uuid4().hex
REDIS_PASSWORD = "marker-redis-pw-" + uuid.uuid4().hex
MARKERS = (API_KEY, NATS_PASSWORD, REDIS_PASSWORD)


def leaks(where: str, data: bytes | str) -> list[str]:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    return [f"{marker[:16]}... in {where}" for marker in MARKERS if marker in text]


async def every_redis_value(client: aioredis.Redis) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    async for key in client.scan_iter(count=500):
        kind = (await client.type(key)).decode()
        if kind == "string":
            values: list[Any] = [await client.get(key)]
        elif kind == "hash":
            values = [item for pair in (await client.hgetall(key)).items() for item in pair]
        elif kind == "list":
            values = await client.lrange(key, 0, -1)
        elif kind == "set":
            values = list(await client.smembers(key))
        elif kind == "zset":
            values = [member for member, _ in await client.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            values = [json.dumps({k.decode(): v.decode("utf-8", "replace") for k, v in fields.items()}).encode()
                      for _, fields in await client.xrange(key)]
        else:
            values = []
        out.append((key.decode("utf-8", "replace"), key))
        out.extend((key.decode("utf-8", "replace"), v if isinstance(v, bytes) else str(v).encode()) for v in values)
    return out


@pytest.mark.timeout(240)
@pytest.mark.parametrize("layout", ["up", "split"])
async def test_no_secret_in_any_output_or_store(fake_anthropic: FakeAnthropic, layout: str) -> None:
    passwords = {"LOOPWIRE_NATS_SERVICES_PASSWORD": NATS_PASSWORD, "LOOPWIRE_NATS_CLIENT_PASSWORD": "c" * 12,
                 "LOOPWIRE_NATS_PROVIDER_PASSWORD": "p" * 12}
    lw = LoopwireContainer(env={
        **E2E_ENV, "ANTHROPIC_BASE_URL": fake_anthropic.url, "ANTHROPIC_API_KEY": API_KEY,
        "LOOPWIRE_LOG_LEVEL": "DEBUG", "OTEL_TRACES_EXPORTER": "console", "LOOPWIRE_OTEL_CAPTURE_CONTENT": "true",
        "LOOPWIRE_TOOL_MODULES": "loopwire.demo.tools"}, layout=layout)
    lw.nats = start_nats(include=USERS_CONF, env=passwords)
    lw.redis = start_redis(password=REDIS_PASSWORD)
    nats_url = f"nats://loopwire-services:{NATS_PASSWORD}@127.0.0.1:{lw.nats.port}"
    redis_url = f"redis://:{REDIS_PASSWORD}@127.0.0.1:{lw.redis.port}/0"
    lw.env.update({"LOOPWIRE_NATS_URL": nats_url, "LOOPWIRE_REDIS_URL": redis_url})
    try:
        lw.start_loopwire()
        nc = await nats.connect(nats_url)
        everything: list[bytes] = []

        async def keep(msg: Any) -> None:
            everything.append(msg.data)

        await nc.subscribe("loopwire.out.>", cb=keep)
        fake_anthropic.reset()
        fake_anthropic.fail_next(529)  # one retried model error, logged
        fake_anthropic.script("*", [
            {"chunks": ["Computing."], "tool_use": [{"name": "calculator", "input": {"expression": "6 * 7"}}]},
            {"chunks": ["It is 42."], "stop_reason": "end_turn"},
        ])
        s = f"secrets-{uuid.uuid4().hex[:8]}"
        async with SessionEvents(nc, s) as ev:
            await ev.publish("start", {"v": 1, "input": "What is 6 * 7?", "tools": ["calculator"]})
            ended = await ev.wait_for("run.ended", timeout=60)
            assert ended["status"] == "completed" and ended["final_text"] == "It is 42."
            await ev.publish("start", b"{not json")  # an error event of its own
            await ev.wait_for("error", timeout=60, code="bad_json")
        await nc.request("loopwire.api.session.get", b"[]", timeout=5)  # a bad query
        await nc.request("loopwire.api.transcript.get", json.dumps({"session_id": s}).encode(), timeout=5)

        found: list[str] = []
        for data in everything:
            found += leaks("an event", data)
        # every message of every stream, headers included
        js = nc.jetstream()
        streams = await js.streams_info()
        assert {"LOOPWIRE_INGRESS", "LOOPWIRE_EVENTS", "LOOPWIRE_WORK"} <= {st.config.name for st in streams}
        stored = 0
        for stream in streams:
            for seq in range(max(1, stream.state.first_seq), stream.state.last_seq + 1):  # 0: never written
                try:
                    msg = await js.get_msg(stream.config.name, seq)
                except NotFoundError:
                    continue
                stored += 1
                found += leaks(f"{stream.config.name} #{seq}", (msg.data or b"") + json.dumps(msg.headers or {}).encode())
        assert stored > 10
        # every Redis key and value
        client = aioredis.Redis.from_url(redis_url)
        try:
            values = await every_redis_value(client)
        finally:
            await client.aclose()
        assert len(values) > 10
        for key, value in values:
            found += leaks(f"redis {key}", value)
        await nc.drain()
    finally:
        lw.stop()
    output = lw.logs()
    # The output is there to be searched: each process's start-up line (and `up`'s banner)
    # with the URLs, DEBUG lines, spans, the retry.
    assert f"up (NATS nats://loopwire-services:***@127.0.0.1:{lw.nats.port}" in output
    assert f"redis://:***@127.0.0.1:{lw.redis.port}/0" in output
    if layout == "up":
        # (the console wraps the banner at its width)
        assert ("loopwire up: router, llm, tools, memory, transcripts on nats://loopwire-services:***@"
                in " ".join(output.split()))
    assert '"trace_id"' in output or "trace_id" in output
    found += leaks("the output of loopwire", output)
    found += leaks("the output of loopwire, lines joined", "".join(output.split()))  # a wrapped line
    assert found == []
