"""The hot path's scripts on a pipelined connection of their own (shared/stores/script_channel.py),
against a real redis-server: the same replies and errors as redis-py, a script the server
forgot loaded again, a dropped connection replaced, a server that stops answering failing
the calls in flight as a timeout, credentials and the database of the client's settings."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator

import pytest
from redis.asyncio.connection import Connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from loopwire.shared.stores import script_channel
from loopwire.shared.stores.redis_connection import OUTAGE_ERRORS, connect_redis
from loopwire.shared.stores.replication import Replication, ScriptCall
from loopwire.shared.stores.script_channel import ScriptChannel, pack
from loopwire.testing.servers import ServerHandle, start_redis

pytestmark = pytest.mark.integration

ECHO = "redis.call('SET', KEYS[1], ARGV[1]); return {redis.call('GET', KEYS[1]), tonumber(ARGV[2]), false}"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    handle = start_redis(use_docker=False)
    yield handle
    handle.stop()


async def test_a_script_answers_on_the_channel_as_through_redis_py(server: ServerHandle) -> None:
    client = connect_redis(server.url.replace("/0", "/2"))
    replication = Replication(client)
    assert replication._channel is not None and replication._channel.db == 2
    script = client.register_script(ECHO)
    try:
        calls = [ScriptCall(script, [f"chan:{n}"], [f"v{n}".encode(), n]) for n in range(300)]
        # at once: one write per loop iteration, each reply to its own call
        replies = await asyncio.gather(*(replication.run(call) for call in calls))
        assert replies == [[f"v{n}".encode(), n, None] for n in range(300)]
        assert replies[7] == await script(keys=["chan:7"], args=[b"v7", 7])  # redis-py's own reply
        assert await client.get("chan:299") == b"v299"  # in the client's database, not in 0
        db0 = connect_redis(server.url)
        assert await db0.exists("chan:299") == 0
        await db0.aclose()

        await client.script_flush()  # a restarted server has no scripts: loaded again
        assert await replication.run(ScriptCall(script, ["chan:a"], [b"a", 1])) == [b"a", 1, None]

        failing = client.register_script("return redis.error_reply('ERR refused by the script')")
        with pytest.raises(ResponseError, match="refused by the script"):
            await replication.run(ScriptCall(failing, ["chan:b"], []))
    finally:
        replication._channel.close()
        await client.aclose()


async def test_a_batch_of_reads_answers_as_a_redis_py_pipeline(server: ServerHandle) -> None:
    client = connect_redis(server.url)
    channel = ScriptChannel.of(client)
    assert channel is not None
    await client.set("batch:s", b"text")
    await client.rpush("batch:l", b"a", b"b", b"c")
    await client.hset("batch:h", mapping={"x": b"1"})
    await client.script_load(ECHO)
    script = client.register_script(ECHO)

    def queue(pipe: object) -> None:
        pipe.get("batch:s")  # type: ignore[attr-defined]
        pipe.get("batch:missing")  # type: ignore[attr-defined]
        pipe.lrange("batch:l", -2, -1)  # type: ignore[attr-defined]
        pipe.hmget("batch:h", ["x", "y"])  # type: ignore[attr-defined]
        pipe.llen("batch:l")  # type: ignore[attr-defined]
        pipe.execute_command("EVALSHA", script.sha, 1, "batch:e", b"v", 3)  # type: ignore[attr-defined]

    try:
        pipe = client.pipeline(transaction=False)
        queue(pipe)
        batch = channel.batch()
        queue(batch)
        expected = [b"text", None, [b"b", b"c"], [b"1", None], 3, [b"v", 3, None]]
        assert await pipe.execute() == expected
        assert await batch.execute() == expected
        assert await batch.execute() == [], "a batch sent is empty again"

        failing = channel.batch().get("batch:s").execute_command("LRANGE", "batch:s", 0, -1).get("batch:s")
        with pytest.raises(ResponseError, match="WRONGTYPE"):  # the first error reply, as redis-py raises it
            await failing.execute()
        assert await channel.batch().get("batch:s").execute() == [b"text"], "the connection is still in step"
    finally:
        channel.close()
        await client.aclose()


async def test_a_dropped_connection_is_replaced(server: ServerHandle) -> None:
    client = connect_redis(server.url)
    channel = ScriptChannel.of(client)
    assert channel is not None
    script = client.register_script(ECHO)
    await client.script_load(ECHO)
    try:
        assert await channel.evalsha(script.sha, ["drop:1"], [b"x", 1]) == [b"x", 1, None]
        killed = await client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        assert killed >= 1
        # retried on a new connection, by the client's retry policy
        assert await channel.evalsha(script.sha, ["drop:2"], [b"y", 2]) == [b"y", 2, None]
    finally:
        channel.close()
        await client.aclose()


async def test_a_server_that_stops_answering_fails_the_calls_as_an_outage(
        server: ServerHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(script_channel, "CHECK_EVERY_S", 0.1)
    client = connect_redis(server.url)
    channel = ScriptChannel.of(client)
    assert channel is not None
    channel.timeout_s = 0.5
    channel.retry = type(channel.retry)(channel.retry._backoff, 0)  # no retry: the first timeout is raised
    await client.script_load(ECHO)
    sha = client.register_script(ECHO).sha
    assert server.proc is not None
    await channel.evalsha(sha, ["stop:0"], [b"z", 0])
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        calls = [asyncio.create_task(channel.evalsha(sha, [f"stop:{n}"], [b"z", n])) for n in range(1, 4)]
        done = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), 5)
        assert all(isinstance(err, RedisTimeoutError) for err in done), done
        assert all(isinstance(err, OUTAGE_ERRORS) for err in done)
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
    assert await channel.evalsha(sha, ["stop:5"], [b"z", 5]) == [b"z", 5, None]  # a new connection
    channel.close()
    await client.aclose()


async def test_the_channel_authenticates_as_the_client_does() -> None:
    secured = start_redis(password="s3cret")
    try:
        client = connect_redis(secured.url, password="s3cret")
        channel = ScriptChannel.of(client)
        assert channel is not None
        await client.script_load(ECHO)
        sha = client.register_script(ECHO).sha
        assert await channel.evalsha(sha, ["auth:1"], [b"ok", 1]) == [b"ok", 1, None]
        wrong = ScriptChannel(client, host=channel.host, port=channel.port, password="wrong")
        with pytest.raises(RedisConnectionError):  # redis-py's AuthenticationError, as redis-py raises it
            await wrong.evalsha(sha, ["auth:2"], [b"no", 2])
        channel.close()
        await client.aclose()
    finally:
        secured.stop()


def test_only_a_plain_tcp_client_gets_a_channel() -> None:
    assert ScriptChannel.of(connect_redis("redis://127.0.0.1:6399/0")) is not None
    assert ScriptChannel.of(connect_redis("unix:///tmp/redis.sock")) is None
    assert ScriptChannel.of(connect_redis("rediss://127.0.0.1:6399/0")) is None
    assert ScriptChannel.of(object()) is None


def test_arguments_are_encoded_as_redis_py_encodes_them() -> None:
    assert pack("EVALSHA", "ab", 1, "k", b"\x00b", 1.5) == (
        b"*6\r\n$7\r\nEVALSHA\r\n$2\r\nab\r\n$1\r\n1\r\n$1\r\nk\r\n$2\r\n\x00b\r\n$3\r\n1.5\r\n")
    with pytest.raises(TypeError):
        pack("SET", "k", True)
    # the same bytes as redis-py's own packer, for the floats, big ints and text it sends
    args = ("EVALSHA", "é", 1 / 3, 7.297498718435124e+17, 2**70, -2, b"\r\n", 1e-7)
    assert pack(*args) == b"".join(Connection().pack_command(*args))
