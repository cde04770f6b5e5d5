"""Test support for loopwire users: a ready system for a test suite.

- `LoopwireContainer`: NATS + Redis + loopwire, testcontainers-style (`with ... as lw:`).
- pytest fixtures in `loopwire.testing.pytest_plugin` (`loopwire_system`, `loopwire_client`).
- `servers`: throwaway nats-server / redis-server on free ports.
"""

from .servers import ServerHandle, docker_available, free_port, free_ports, start_nats, start_redis
from .system import LoopwireContainer

__all__ = ["LoopwireContainer", "ServerHandle", "docker_available", "free_port", "free_ports", "start_nats",
           "start_redis"]
