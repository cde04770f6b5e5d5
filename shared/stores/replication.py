"""Writes a failover must not lose: each script, then `WAIT` for its master's replicas.

Redis replicates asynchronously: a master acknowledges a write before its replicas have
it, and a failover to a replica that was behind loses what it had not received. For most
keys that costs a little work done again; for three it breaks a promise:
- a step record (shared/stores/step_store.py): lost, the model or the tool is called
  again for a result the loop already used;
- a session commit (session_store.py): lost, the session goes back one transition while
  its effects (work published, events sent) stand;
- an event `seq` (event_log.py): lost, the counter gives the same seq to another event,
  and a client that skips seqs it has seen drops that one. The seq floor
  (seq_floor.py) does not cover this: it is read for a session with no state at all, not
  for one whose counter went back a few steps.

So these writes run through `Replication.run`: the script and `WAIT <replicas> <timeout>`
in one pipeline, on one connection (WAIT counts the replicas that have that connection's
writes), on a cluster sent to the master of the script's slot. The caller publishes what
it wrote only after that. A WAIT that comes back short (the replica is down, or was
promoted and its old master is gone) lets the write go on, since waiting longer would stop
every session of that master; the master's writes then stop waiting, and a probe of its
replicas every few seconds turns the wait on again once they are back. Without replicas
to wait for (one server, LOOPWIRE_REDIS_WAIT_REPLICAS=0) a call is the plain script call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from loopwire.shared.stores.redis_connection import is_cluster
from loopwire.shared.stores.script_channel import ScriptChannel, run_script

__all__ = ["Replication", "ScriptCall", "log"]

log = logging.getLogger("loopwire.redis.replication")

PROBE_EVERY_S = 5.0
"""How often a master whose writes stopped waiting is asked whether its replicas are back."""


@dataclass(frozen=True)
class ScriptCall:
    script: AsyncScript
    keys: list[str]
    args: list[Any]


class Replication:
    def __init__(self, redis: Any, replicas: int = 0, timeout_ms: int = 500,
                 *, probe_every_s: float = PROBE_EVERY_S) -> None:
        self._r = redis
        self.replicas = max(0, replicas)
        self.timeout_ms = max(1, timeout_ms)
        self.probe_every_s = probe_every_s
        self._cluster = is_cluster(redis)
        self._channel = ScriptChannel.of(redis)
        self._unreplicated: dict[str, float] = {}
        """Master -> when to probe its replicas next: its writes do not wait meanwhile."""
        self._probes: set[asyncio.Task[None]] = set()

    @property
    def channel(self) -> ScriptChannel | None:
        """The process's script channel (None on a Redis Cluster, Sentinel, TLS or a
        socket), for the other hot calls to share its connection and its writes."""
        return self._channel

    def unreplicated(self) -> set[str]:
        """The masters whose writes do not wait now (their replicas did not answer)."""
        return set(self._unreplicated)

    async def run(self, call: ScriptCall, *, durable: bool = True) -> Any:
        """The script's result; when `durable`, acknowledged by the master's replicas first."""
        node = await self._node(call.keys[0]) if durable and self.replicas else None
        if node is None or not self._waits(node):
            return await self._plain(call)
        result = await self._pipeline(call, node)
        if isinstance(result, NoScriptError):  # a restarted or promoted node: load it, run it again
            await self._r.script_load(call.script.script)
            result = await self._pipeline(call, node)
        if isinstance(result, Exception):
            raise result
        return result

    async def _plain(self, call: ScriptCall) -> Any:
        """The script alone: on the process's script channel when it has one (one server
        over TCP: script_channel.py), else through redis-py."""
        return await run_script(self._channel, self._r, call.script, keys=call.keys, args=call.args)

    async def _pipeline(self, call: ScriptCall, node: Any) -> Any:
        pipe = self._r.pipeline(transaction=False)
        # EVALSHA as a plain command: a cluster pipeline refuses its method, not the command.
        pipe.execute_command("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)
        if self._cluster:
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms, target_nodes=node)
        else:
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
        result, acked = await pipe.execute(raise_on_error=False)
        if isinstance(acked, Exception) or int(acked) < self.replicas:
            self._short(node, acked)
        return result

    async def _node(self, key: str) -> Any:
        if not self._cluster:
            return "master"
        if getattr(self._r, "_initialize", False):
            await self._r.initialize()
        return self._r.get_node_from_key(key)

    def _name(self, node: Any) -> str:
        return str(getattr(node, "name", node))

    def _waits(self, node: Any) -> bool:
        name = self._name(node)
        probe_at = self._unreplicated.get(name)
        if probe_at is None:
            return True
        if time.monotonic() >= probe_at:
            self._unreplicated[name] = time.monotonic() + self.probe_every_s
            task = asyncio.create_task(self._probe(node), name=f"redis-replicas-probe {name}")
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)
        return False

    def _short(self, node: Any, acked: Any) -> None:
        name = self._name(node)
        if name not in self._unreplicated:
            log.warning("Redis master %s: a write was acknowledged by %s of %d replicas within %d ms; its writes go "
                        "on without waiting until its replicas are back (a failover meanwhile may lose the last "
                        "writes)", name, acked, self.replicas, self.timeout_ms)
        self._unreplicated[name] = time.monotonic() + self.probe_every_s

    async def _probe(self, node: Any) -> None:
        with contextlib.suppress(Exception):
            if self._cluster:
                info = await self._r.info("replication", target_nodes=node)
            else:
                info = await self._r.info("replication")
            if isinstance(info, dict) and int(info.get("connected_slaves", 0)) >= self.replicas:
                self._unreplicated.pop(self._name(node), None)
                log.info("Redis master %s has its replicas again: its writes wait for them", self._name(node))
