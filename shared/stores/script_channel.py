"""The hot path's scripts (step claims and records, event appends, session commits) on one
pipelined connection of their own, parsed by hiredis.

Every tool-turn runs ~7 of these scripts. Through redis-py each costs ~40 µs of client CPU
at 50 calls at once (its connection pool, retry wrapper, health check, per-command
observability hook and read timeout), against ~7 µs written as RESP on a connection of
our own and read with hiredis's reader (docs/bench-notes/history.md). So a process
that talks to one Redis server over TCP sends its `EVALSHA`s here: the calls of a loop
iteration go out in one write, and the replies come back in their order. What redis-py
gives a call is kept: the client's retry policy (a dropped connection or a timeout is
tried again on a new connection, with its backoff), the command timeout
(redis_connection.COMMAND_TIMEOUT_S: a Redis that does not answer fails every call in
flight as a timeout, an outage), redis-py's exception for each error reply (NOSCRIPT,
READONLY, LOADING ...), and the connection's credentials and database.

A Redis Cluster, Sentinel, TLS or a Unix socket keep redis-py (`ScriptChannel.of` is None):
the channel knows one address, in the clear.
"""

from __future__ import annotations

import asyncio
import collections
import socket
import time
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis._parsers.base import BaseParser
from redis.asyncio.connection import Connection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from loopwire.shared.stores.redis_connection import COMMAND_TIMEOUT_S

__all__ = ["CHECK_EVERY_S", "ScriptChannel", "pack", "run_script"]

CHECK_EVERY_S = 1.0
"""How often a connection with calls in flight checks the oldest one against the timeout."""


def pack(*args: Any) -> bytes:
    """A command as RESP, its arguments encoded as redis-py's Encoder does (str as UTF-8,
    int and float as their repr; bool and anything else a TypeError). hiredis builds it
    in C: about a third of the CPU of building it here, for the same bytes."""
    return hiredis.pack_command(args)


class _Link(asyncio.Protocol):
    """One connection: calls written in order, each reply given to the oldest call waiting."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.reader = hiredis.Reader()
        self.waiting: collections.deque[tuple[asyncio.Future[Any], float]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self._out: list[bytes] = []
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)

    def call(self, data: bytes) -> asyncio.Future[Any]:
        future = self._loop.create_future()
        if self.lost is not None:
            future.set_exception(self.lost)
            return future
        if not self._out:
            self._loop.call_soon(self._flush)  # this iteration's calls go out in one write
        self._out.append(data)
        self.waiting.append((future, time.monotonic()))
        if self._timer is None:
            self._timer = self._loop.call_later(CHECK_EVERY_S, self._check)
        return future

    def _flush(self) -> None:
        if self._out and self.transport is not None and self.lost is None:
            self.transport.write(b"".join(self._out))
        self._out.clear()

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            if not self.waiting:
                self._fail(RedisConnectionError("Redis sent a reply nobody asked for"))
                return
            future, _ = self.waiting.popleft()
            if future.done():  # its caller was cancelled
                continue
            if isinstance(reply, hiredis.ReplyError):
                future.set_exception(BaseParser.parse_error(str(reply)))
            else:
                future.set_result(reply)

    def _check(self) -> None:
        self._timer = None
        if not self.waiting:
            return
        if time.monotonic() - self.waiting[0][1] > self.timeout_s:
            self._fail(RedisTimeoutError(f"Redis did not answer within {self.timeout_s:.0f} s"))
        else:
            self._timer = self._loop.call_later(CHECK_EVERY_S, self._check)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(RedisConnectionError(f"Connection to Redis lost: {exc}" if exc else "Connection closed by server."))

    def _fail(self, error: Exception) -> None:
        if self.lost is None:
            self.lost = error
        while self.waiting:
            future, _ = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)
        if self.transport is not None:
            self.transport.abort()


class ScriptChannel:
    def __init__(self, redis: aioredis.Redis, *, host: str, port: int, db: int = 0, username: str | None = None,
                 password: str | None = None, connect_timeout_s: float | None = 5.0, retry: Retry | None = None,
                 timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        self._redis = redis
        self.host, self.port, self.db = host, port, db
        self._auth = [a for a in (username, password) if a] if password else []
        self.connect_timeout_s = connect_timeout_s
        self.retry = retry or Retry(NoBackoff(), 0)
        self.timeout_s = timeout_s
        self._link: _Link | None = None
        self._linking: asyncio.Future[_Link] | None = None

    @classmethod
    def of(cls, redis: Any) -> ScriptChannel | None:
        """A channel to the server of `redis` (a plain TCP `redis.asyncio.Redis`), else None."""
        if type(redis) is not aioredis.Redis:
            return None
        pool = redis.connection_pool
        if pool.connection_class is not Connection:
            return None
        kw = pool.connection_kwargs
        return cls(redis, host=kw.get("host", "localhost"), port=int(kw.get("port", 6379)), db=int(kw.get("db", 0)),
                   username=kw.get("username"), password=kw.get("password"),
                   connect_timeout_s=kw.get("socket_connect_timeout"), retry=kw.get("retry"),
                   timeout_s=kw.get("socket_timeout") or COMMAND_TIMEOUT_S)

    async def evalsha(self, sha: str, keys: list[str], args: list[Any]) -> Any:
        """The script's reply; redis-py's exceptions (NoScriptError and the others) as it raises them."""
        data = pack("EVALSHA", sha, len(keys), *keys, *args)
        return await self.retry.call_with_retry(lambda: self._call(data), self._dropped)

    def batch(self) -> CommandBatch:
        """Commands to send together (a pipeline's reads on this channel)."""
        return CommandBatch(self)

    async def send_all(self, commands: list[bytes]) -> list[Any]:
        """Every command's reply, in order, the commands written in one go; as redis-py's
        pipeline, the first error reply raised once all have answered (retried as a whole
        when the connection drops: the batches sent here are reads, expiries and an
        idempotent claim)."""
        return await self.retry.call_with_retry(lambda: self._call_all(commands), self._dropped)

    async def _call_all(self, commands: list[bytes]) -> list[Any]:
        link = await self._current()
        futures = [link.call(c) for c in commands]
        # Awaited in turn: they are answered in order, and gather would add a gathering
        # future and a callback per command (~2 us each) to a batch of reads.
        replies: list[Any] = []
        try:
            for future in futures:
                try:
                    replies.append(await future)
                except Exception as exc:
                    replies.append(exc)
        except BaseException:
            for future in futures:
                future.cancel()  # the caller is cancelled: nobody is left for their replies
            raise
        failed = [r for r in replies if isinstance(r, BaseException)]
        if failed:
            dropped = [r for r in failed if not isinstance(r, ResponseError)]
            raise dropped[0] if dropped else failed[0]
        return replies

    async def _call(self, data: bytes) -> Any:
        link = await self._current()
        return await link.call(data)

    async def _dropped(self, error: Exception) -> None:
        link, self._link = self._link, None
        if link is not None and link.transport is not None:
            link.transport.abort()

    async def _current(self) -> _Link:
        link = self._link
        if link is not None and link.lost is None and link._loop is asyncio.get_running_loop():
            return link
        self._link = None
        if self._linking is None or self._linking.get_loop() is not asyncio.get_running_loop():
            self._linking = asyncio.ensure_future(self._connect())
        linking = self._linking
        try:
            return await asyncio.shield(linking)
        finally:
            if linking.done() and self._linking is linking:
                self._linking = None

    async def _connect(self) -> _Link:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, link = await loop.create_connection(lambda: _Link(self.timeout_s), self.host, self.port)
                if self._auth:
                    await link.call(pack("AUTH", *self._auth))
                if self.db:
                    await link.call(pack("SELECT", self.db))
        except TimeoutError:
            raise RedisTimeoutError(f"connecting to Redis at {self.host}:{self.port} timed out") from None
        except OSError as exc:
            raise RedisConnectionError(f"cannot connect to Redis at {self.host}:{self.port}: {exc}") from None
        except ResponseError as exc:  # AUTH or SELECT refused: as redis-py reports it
            raise RedisConnectionError(f"Redis at {self.host}:{self.port} refused the connection: {exc}") from None
        self._link = link
        return link

    def close(self) -> None:
        link, self._link = self._link, None
        if link is not None and link.transport is not None:
            link.transport.close()


async def run_script(channel: ScriptChannel | None, redis: Any, script: AsyncScript, *, keys: list[str],
                     args: list[Any]) -> Any:
    """A registered script's answer: on `channel` when the process has one (a NOSCRIPT, from
    a restarted or flushed server, loads it through `redis` and runs it again), else
    through redis-py."""
    if channel is None:
        return await script(keys=keys, args=args)
    try:
        return await channel.evalsha(script.sha, keys, args)
    except NoScriptError:
        await redis.script_load(script.script)
        return await channel.evalsha(script.sha, keys, args)


class CommandBatch:
    """The commands of a redis-py pipeline that the hot reads use, sent together on a
    channel (`ScriptChannel.batch`). Replies are as hiredis reads them: bytes, lists of
    bytes, integers, which is what redis-py returns for these commands on a connection that
    does not decode (EXPIRE's 1/0 where redis-py says True/False)."""

    def __init__(self, channel: ScriptChannel) -> None:
        self._channel = channel
        self._commands: list[bytes] = []

    def execute_command(self, *args: Any) -> CommandBatch:
        self._commands.append(pack(*args))
        return self

    def get(self, key: str) -> CommandBatch:
        return self.execute_command("GET", key)

    def lrange(self, key: str, start: int, stop: int) -> CommandBatch:
        return self.execute_command("LRANGE", key, start, stop)

    def llen(self, key: str) -> CommandBatch:
        return self.execute_command("LLEN", key)

    def hmget(self, key: str, fields: list[str]) -> CommandBatch:
        return self.execute_command("HMGET", key, *fields)

    def expire(self, key: str, seconds: int) -> CommandBatch:
        return self.execute_command("EXPIRE", key, seconds)

    async def execute(self) -> list[Any]:
        commands, self._commands = self._commands, []
        return await self._channel.send_all(commands) if commands else []
