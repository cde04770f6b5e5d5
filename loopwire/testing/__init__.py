"""Test support for loopwire users: a ready system for a test suite.

- `LoopwireContainer`: NATS + Redis + loopwire, testcontainers-style (`with ... as lw:`), in
  one of the `LAYOUTS` (`up`, `up --workers 2`, or one `loopwire serve` per service).
- pytest fixtures in `loopwire.testing.pytest_plugin` (`loopwire_system`, `loopwire_client`).
- `servers`: throwaway nats-server / redis-server on free ports.
- `store_conformance`: the checks every backend of loopwire's stores passes (`CHECKS`), for
  a backend of your own too.
"""

from .processes import LoopwireProcess
from .servers import ServerHandle, docker_available, free_port, free_ports, start_nats, start_redis
from .system import LAYOUTS, LoopwireContainer

__all__ = ["LAYOUTS", "LoopwireContainer", "LoopwireProcess", "ServerHandle", "docker_available", "free_port",
           "free_ports", "start_nats",
           "start_redis"]
