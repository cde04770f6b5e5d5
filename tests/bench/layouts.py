"""The layouts `make bench` measures, and the servers they run on.

Each layout is a set of loopwire processes (loopwire.testing's LoopwireContainer with a
layout of commands) on the bench's own nats-server and redis-server, started once per run
on free ports with the durability compose and Helm deploy: JetStream with
`sync_interval: always`, Redis with `appendonly yes` and `appendfsync everysec`
(loopwire.testing.start_nats / start_redis). nats-server also serves its monitoring port,
for the message counts of wire.py. A layout with `redis_masters` runs on a Redis Cluster of
its own instead (loopwire.testing.start_redis_cluster: that many masters, a replica each),
and one with `nats_nodes` on a NATS cluster of its own (loopwire.testing.start_nats_cluster,
the same fsync, every stream on each node: LOOPWIRE_STREAM_REPLICAS), each started for it
and stopped after it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from loopwire.launcher import SERVICE_NAMES
from loopwire.testing import (
    LAYOUTS,
    LoopwireContainer,
    NatsCluster,
    RedisClusterHandle,
    ServerHandle,
    free_port,
    start_nats,
    start_nats_cluster,
    start_redis,
    start_redis_cluster,
)

from .procstat import children_of
from .targets import TARGETS, Targets

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class BenchLayout:
    key: str
    name: str
    commands: tuple[str, ...]
    targets: Targets | None = None
    """Against the durable floor (targets.py); None: measured for reference."""
    redis_masters: int = 0
    """On a Redis Cluster of this many masters (a replica each); 0: the bench's one Redis."""
    env: tuple[tuple[str, str], ...] = ()
    """Settings of this layout's processes beside service_env()."""
    nats_nodes: int = 0
    """On a NATS cluster of this many nodes (streams replicated on up to 3); 0: the bench's
    one nats-server."""


def bench_layouts(workers: int = 2) -> dict[str, BenchLayout]:
    one_router = tuple(f"serve {name}" for name in SERVICE_NAMES)
    return {
        "up": BenchLayout("up", "loopwire up", LAYOUTS["up"]),
        "workers": BenchLayout("workers", f"loopwire up --workers {workers}", (f"up --workers {workers}",),
                               TARGETS["workers"]),
        "split1": BenchLayout("split1", "5 × loopwire serve (1 router)", one_router, TARGETS["split1"]),
        "split": BenchLayout("split", "6 × loopwire serve (2 routers)", LAYOUTS["split"], TARGETS["split"]),
        "split_redis_cluster": BenchLayout("split_redis_cluster",
                                           "split, 3-master Redis Cluster",
                                           LAYOUTS["split"], redis_masters=3),
        # The same without waiting for the replicas: what WAIT costs in the whole layout.
        "split_redis_cluster_nowait": BenchLayout("split_redis_cluster_nowait",
                                                  "split, Redis Cluster, no WAIT",
                                                  LAYOUTS["split"], redis_masters=3,
                                                  env=(("LOOPWIRE_REDIS_WAIT_REPLICAS", "0"),)),
        "split_nats_r3": BenchLayout("split_nats_r3", "split, 3-node NATS (R3)", LAYOUTS["split"], nats_nodes=3),
        # What a deployment beyond one machine runs: both clusters.
        "split_clustered": BenchLayout("split_clustered", "split, 3-node NATS (R3) + Redis Cluster",
                                       LAYOUTS["split"], nats_nodes=3, redis_masters=3),
    }


LAYOUT_ORDER = ("split1", "split", "up", "workers", "split_redis_cluster", "split_nats_r3", "split_clustered")
"""The default run's layouts, in order; --layouts may name any of bench_layouts(). The
deployed layouts first: the durable floor's plan comes from their trace, and its
responders then run beside every layout after (passes.py, Pass.start_floor)."""


def with_probe(probe: Path, variable: str, prefix: str) -> str:
    """A new folder for what `probe` (a folder with a sitecustomize.py) writes, named to it
    in `variable`, and the probe on PYTHONPATH: every process started after this loads it
    (they inherit this environment). Returns the folder."""
    out = tempfile.mkdtemp(prefix=prefix)
    os.environ[variable] = out
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(probe), os.environ.get("PYTHONPATH", "")) if p)
    return out


def probe_output(out: str, pid: int, suffix: str, timeout_s: float = 10.0) -> Path:
    """The file a probe (`with_probe`) writes for process `pid` once asked (a signal), after
    waiting up to `timeout_s` for it to be there."""
    path = Path(out) / f"{pid}{suffix}"
    deadline = time.monotonic() + timeout_s
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return path


def service_env() -> dict[str, str]:
    return {
        "LOOPWIRE_LLM_PROVIDER": "scripted",
        "LOOPWIRE_TOOL_MODULES": "tests.bench.bench_tools",
        "LOOPWIRE_LOG_LEVEL": "WARNING",
        # The 200-turn session of the Redis-bytes measurement: the agentic profile allows
        # 100 generations per outer iteration.
        "LOOPWIRE_MAX_INNER_ITERATIONS": "1000",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
        # A setting given to the bench goes to every process it starts, so two runs can
        # compare one switch (e.g. LOOPWIRE_DIRECT_RESULTS=false).
        **{k: v for k, v in os.environ.items() if k.startswith("LOOPWIRE_") and not k.startswith("LOOPWIRE_BENCH")},
    }


@dataclass
class Servers:
    nats: ServerHandle
    redis: ServerHandle
    monitor_url: str
    redis_cluster: RedisClusterHandle | None = None
    """The Redis Cluster a layout runs on instead of `redis` (`with_redis_cluster`)."""
    nats_cluster: NatsCluster | None = None
    """The NATS cluster a layout runs on instead of `nats` (`with_nats_cluster`)."""

    @property
    def nats_urls(self) -> list[str]:
        return self.nats_cluster.urls if self.nats_cluster is not None else [self.nats.url]

    @property
    def nats_url(self) -> str:
        """A LOOPWIRE_NATS_URL: the one server, or every node comma-joined."""
        return ",".join(self.nats_urls)

    def monitor_urls(self) -> list[str]:
        """The monitoring endpoints of the NATS servers the layout runs on."""
        if self.nats_cluster is None:
            return [self.monitor_url]
        return [f"http://127.0.0.1:{node.http_port}" for node in self.nats_cluster.nodes]

    def stream_leaders(self) -> dict[str, list[str]]:
        """Node -> the streams it leads, on a NATS cluster (empty on one server)."""
        if self.nats_cluster is None:
            return {}
        by_node: dict[str, list[str]] = {node.name: [] for node in self.nats_cluster.nodes}
        for stream, leader in sorted(self.nats_cluster.leaders().items()):
            by_node.setdefault(leader, []).append(stream)
        return by_node

    @property
    def redis_url(self) -> str:
        return self.redis_cluster.url if self.redis_cluster is not None else self.redis.url

    def redis_master_urls(self) -> list[str]:
        """The Redis servers the layout's data is on: the one, or every master."""
        if self.redis_cluster is None:
            return [self.redis.url]
        return [node.url for node in self.redis_cluster.masters()]

    def nats_pids(self) -> dict[str, int]:
        if self.nats_cluster is None:
            return {"nats-server": self.nats.proc.pid}  # type: ignore[union-attr]
        return {f"nats-server {node.name}": node.proc.pid for node in self.nats_cluster.nodes
                if node.proc is not None}

    def pids(self) -> dict[str, int]:
        if self.redis_cluster is None:
            return {**self.nats_pids(), "redis-server": self.redis.proc.pid}  # type: ignore[union-attr]
        roles = self.redis_cluster.roles()
        out = self.nats_pids()
        for node in self.redis_cluster.nodes:
            if node.proc is not None:
                out[f"redis-server :{node.port} ({'master' if roles.get(node.port) == 'master' else 'replica'})"] = \
                    node.proc.pid
        return out

    def with_redis_cluster(self, masters: int) -> Servers:
        """These servers with a Redis Cluster of `masters` masters (a replica each) of
        their own in place of the one Redis; `stop_redis_cluster()` ends it."""
        return Servers(self.nats, self.redis, self.monitor_url, start_redis_cluster(masters=masters, replicas=1),
                       self.nats_cluster)

    def with_nats_cluster(self, nodes: int, sync_always: bool = True) -> Servers:
        """These servers with a NATS cluster of `nodes` of their own in place of the one
        nats-server (the same fsync); `stop_nats_cluster()` ends it."""
        return Servers(self.nats, self.redis, self.monitor_url, self.redis_cluster,
                       start_nats_cluster(nodes, sync_always=sync_always))

    def stop_redis_cluster(self) -> None:
        if self.redis_cluster is not None:
            self.redis_cluster.stop()

    def stop_nats_cluster(self) -> None:
        if self.nats_cluster is not None:
            self.nats_cluster.stop()

    def stop(self) -> None:
        self.nats.stop()
        self.redis.stop()
        self.stop_redis_cluster()
        self.stop_nats_cluster()


def start_servers(sync_always: bool = True) -> Servers:
    """nats-server (JetStream, fsync always unless told, a monitoring port) and
    redis-server (AOF)."""
    port = free_port()
    conf_dir = tempfile.mkdtemp(prefix="lw-bench-nats-")
    conf = Path(conf_dir) / "monitor.conf"
    conf.write_text(f'http: "127.0.0.1:{port}"\n')
    nats_server = start_nats(use_docker=False, include=conf, sync_always=sync_always)
    redis_server = start_redis(use_docker=False)
    return Servers(nats_server, redis_server, f"http://127.0.0.1:{port}")


class System:
    """The loopwire processes of one layout, on the bench's NATS and Redis."""

    def __init__(self, servers: Servers, layout: BenchLayout) -> None:
        self.layout = layout
        # A loaded machine starts a process in up to a minute or more (imports, schemas).
        self.part = LoopwireContainer(env={**service_env(), **dict(layout.env)}, use_docker=False, layout=layout.commands, ready_timeout=300,
                                      redis_cluster=servers.redis_cluster, nats_cluster=servers.nats_cluster)
        if servers.nats_cluster is None:
            self.part.nats = servers.nats
        if servers.redis_cluster is None:
            self.part.redis = servers.redis

    def start(self) -> None:
        self.part.start_loopwire()  # every process (and worker) answers /readyz

    def pids(self) -> dict[str, int]:
        """Process label -> pid: `router`, `router 2`, ... in the split layouts; the workers
        of `up --workers N` as `loopwire up (worker i)`."""
        out: dict[str, int] = {}
        seen: dict[str, int] = {}
        for process in self.part.processes:
            if process.proc is None:
                continue
            if process.service == "up":
                kids = children_of(process.proc.pid)
                out["loopwire up" + (" (worker 0)" if kids else "")] = process.proc.pid
                for i, child in enumerate(kids, start=1):
                    out[f"loopwire up (worker {i})"] = child
                continue
            seen[process.service] = seen.get(process.service, 0) + 1
            n = seen[process.service]
            out[process.service if n == 1 else f"{process.service} {n}"] = process.proc.pid
        return out

    def stop(self, keep_logs: bool = False) -> list[str]:
        """Stop every process; the paths of their logs when kept, else the logs deleted."""
        with contextlib.suppress(Exception):
            self.part.stop_loopwire()
        kept = []
        for process in self.part.processes:
            if keep_logs:
                kept.append(str(process.log_path))
            else:
                process.log_path.unlink(missing_ok=True)
        return kept
