"""Test support for loopwire users: a ready system for a test suite.

- `LoopwireContainer`: NATS + Redis + loopwire, testcontainers-style (`with ... as lw:`), in
  one of the `LAYOUTS` (`up`, `up --workers 2`, or one `loopwire serve` per service).
- pytest fixtures in `loopwire.testing.pytest_plugin` (`loopwire_system`, `loopwire_client`).
- `servers`: throwaway nats-server / redis-server on free ports.
- `start_nats_cluster(n)`: n nats-server processes routed into one JetStream cluster, a
  handle (`NatsCluster`) that kills, restarts and wipes a node and finds a stream's leader;
  `LoopwireContainer(nats_cluster=...)` runs loopwire on one.
- `start_redis_cluster(masters, replicas)` / `start_redis_sentinel(replicas, sentinels)`: a
  Redis Cluster or a master behind sentinels on loopback, with handles that kill and restart
  a node, find the master holding most keys and wait for a failover;
  `LoopwireContainer(redis_cluster=..., redis_sentinel=...)` runs loopwire on them.
- `store_conformance`: the checks every backend of loopwire's stores passes (`CHECKS`), for
  a backend of your own too.
- `replay_session`, `assert_replay_holds`: a recorded session replayed against another
  model or system prompt, as a regression test (replay.py).
"""

from .nats_cluster import NatsCluster, NatsNode, start_nats_cluster
from .processes import LoopwireProcess
from .redis_cluster import (
    RedisClusterHandle,
    RedisNode,
    RedisSentinelHandle,
    start_redis_cluster,
    start_redis_sentinel,
)
from .replay import assert_replay_holds, replay_session
from .servers import ServerHandle, docker_available, free_port, free_ports, start_nats, start_redis
from .system import LAYOUTS, LoopwireContainer

__all__ = ["LAYOUTS", "LoopwireContainer", "LoopwireProcess", "NatsCluster", "NatsNode", "RedisClusterHandle",
           "RedisNode", "RedisSentinelHandle", "ServerHandle", "assert_replay_holds", "docker_available", "free_port",
           "free_ports", "replay_session", "start_nats", "start_nats_cluster", "start_redis", "start_redis_cluster",
           "start_redis_sentinel"]
