"""A whole loopwire for a test suite: NATS, Redis and loopwire, as one object.

    from loopwire.testing import LoopwireContainer

    with LoopwireContainer(env={"ANTHROPIC_BASE_URL": fake.url}) as lw:
        nats_url = lw.get_nats_url()
        ...

NATS and Redis run as testcontainers when a Docker engine answers, and as the
pip-shipped `nats-server` / `redis-server` processes otherwise. loopwire itself runs as
local processes in one of three layouts (`layout=`, see LAYOUTS): `loopwire up`, `loopwire
up --workers 2`, or the deployed one, each service its own `loopwire serve NAME` process
with two routers (as docker-compose.yml and the Helm chart run it). With `image=` it runs
as a container of that image when Docker answers: LoopwireContainer is a testcontainers
`DockerContainer` (`with_env`, `get_exposed_port`, ... as any other module), which keeps
the local processes as its fallback on a machine without Docker. `kill()` / `start_loopwire()` crash and
restart the whole of it; `kill_service()`, `pause_service()` / `resume_service()` and
`start_loopwire()` again do it to one service's processes alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from typing import Any

from testcontainers.core.container import DockerContainer  # type: ignore[import-untyped]

from .nats_cluster import NatsCluster, start_nats_cluster
from .processes import LoopwireProcess
from .redis_cluster import RedisClusterHandle, RedisSentinelHandle, start_redis_cluster, start_redis_sentinel
from .servers import ServerHandle, docker_available, start_nats, start_redis

LAYOUTS: dict[str, tuple[str, ...]] = {
    # One process, all five services, hops handed over in-process.
    "up": ("up",),
    # Two processes of all five services: two routers among them.
    "workers": ("up --workers 2",),
    # What compose and Helm deploy: one process per service, two router replicas.
    "split": ("serve router", "serve router", "serve llm", "serve tools", "serve memory", "serve transcripts"),
}
"""Layout name -> the loopwire commands it runs, one process each."""


class LoopwireContainer(DockerContainer):  # type: ignore[misc]
    def __init__(self, env: dict[str, str] | None = None, prefix: str = "loopwire",
                 use_docker: bool | None = None, *, image: str | None = None,
                 services: str = "up", ready_timeout: float = 60.0, layout: str | tuple[str, ...] | None = None,
                 nats_options: dict[str, Any] | None = None, redis_options: dict[str, Any] | None = None,
                 redis_cluster: int | RedisClusterHandle | None = None,
                 redis_sentinel: bool | RedisSentinelHandle | None = None,
                 nats_cluster: int | NatsCluster | None = None) -> None:
        """`nats_options` / `redis_options`: keyword arguments of `start_nats` /
        `start_redis` (a users config, TLS, a Redis password); loopwire's own credentials
        for them go in `env` (LOOPWIRE_NATS_USER, LOOPWIRE_REDIS_PASSWORD, ...).

        `redis_cluster`: run on a Redis Cluster instead of one server: a number of
        masters (a cluster of this container's own with a replica each,
        `start_redis_cluster`, stopped with it) or a started one the caller owns (shared
        by a module's tests; left running). `redis_sentinel`: on a master behind
        sentinels, likewise (True: its own, one replica and three sentinels).

        `nats_cluster`: run on a NATS cluster instead of one server: a number of nodes
        (a cluster of this container's own, `start_nats_cluster(n)`, stopped with it) or a
        started `NatsCluster` the caller owns (shared by a module's tests; left running).
        loopwire gets every node's URL, and `LOOPWIRE_STREAM_REPLICAS` is the cluster's
        size up to 3 unless `env` sets it."""
        if isinstance(layout, str) and layout not in LAYOUTS:
            raise ValueError(f"unknown layout {layout!r}; choose from {', '.join(LAYOUTS)}")
        self.env = dict(env or {})
        self.nats_options = dict(nats_options or {})
        self.redis_options = dict(redis_options or {})
        self.prefix = prefix
        self.use_docker = docker_available() if use_docker is None else use_docker
        self.image = image  # type: ignore[assignment]  # None: no image, local processes
        self.layout = layout
        # `services` is one loopwire command (`up`, `serve router`, ...); a layout is several.
        self.services = services
        self.ready_timeout = ready_timeout
        self.nats: ServerHandle | None = None
        self.redis: ServerHandle | None = None
        self.redis_cluster = redis_cluster if isinstance(redis_cluster, RedisClusterHandle) else None
        self.redis_sentinel = redis_sentinel if isinstance(redis_sentinel, RedisSentinelHandle) else None
        self._own_redis = (redis_cluster if isinstance(redis_cluster, int) and redis_cluster is not True else 0,
                           redis_sentinel is True)
        self.nats_cluster = nats_cluster if isinstance(nats_cluster, NatsCluster) else None
        self._own_nats_nodes = nats_cluster if isinstance(nats_cluster, int) else 0
        self._owned: list[RedisClusterHandle | RedisSentinelHandle | NatsCluster] = []
        # A layout is a name in LAYOUTS or its own tuple of commands (`serve tools` twice, ...).
        commands = LAYOUTS[layout] if isinstance(layout, str) else layout or (services,)
        self.processes = [LoopwireProcess(command) for command in commands]
        self.container: Any = None
        self._container_port = 0
        if self.image and self.use_docker:
            # The Docker side of the object: the image, run with the command of `services`.
            # Without Docker it is not set up at all (testcontainers' own set-up connects to
            # the engine); the processes above are the fallback.
            super().__init__(self.image, command=self.services, env=self.env)

    # -- testcontainers-style API ---------------------------------------------------------------
    def start(self) -> LoopwireContainer:
        try:
            self._start_nats()
            self._start_redis()
            self.start_loopwire()
        except BaseException:
            # `with` never reaches __exit__ when __enter__ raises (a process not ready in
            # time on a busy machine): stop what did start, or it runs on after the test.
            self.stop()
            raise
        return self

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        """Stop loopwire (its container or processes), then NATS and Redis."""
        self.stop_loopwire()
        for server in (self.nats, self.redis, *self._owned):
            if server is not None:
                server.stop()
        self._owned.clear()

    def _start_nats(self) -> None:
        if self._own_nats_nodes:
            self.nats_cluster = start_nats_cluster(self._own_nats_nodes)
            self._owned.append(self.nats_cluster)
        elif self.nats_cluster is None:
            self.nats = start_nats(self.use_docker, **self.nats_options)

    def _start_redis(self) -> None:
        masters, sentinel = self._own_redis
        if masters:
            self.redis_cluster = start_redis_cluster(masters=masters, replicas=1)
            self._owned.append(self.redis_cluster)
        elif sentinel:
            self.redis_sentinel = start_redis_sentinel()
            self._owned.append(self.redis_sentinel)
        elif self.redis_cluster is None and self.redis_sentinel is None:
            self.redis = start_redis(self.use_docker, **self.redis_options)

    def __enter__(self) -> LoopwireContainer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def get_nats_url(self) -> str:
        """The LOOPWIRE_NATS_URL loopwire uses: on a cluster every node's, comma-joined
        (nats-py takes them as a list: `nats.connect(servers=url.split(","))`)."""
        if self.nats_cluster is not None:
            return self.nats_cluster.url
        assert self.nats is not None, "start() first"
        return self.nats.url

    def get_redis_url(self) -> str:
        """The LOOPWIRE_REDIS_URL loopwire uses: on a cluster every node's, comma-joined;
        behind sentinels the master's scheme and database (redis_env() has the rest)."""
        if self.redis_cluster is not None:
            return self.redis_cluster.url
        if self.redis_sentinel is not None:
            return self.redis_sentinel.url
        assert self.redis is not None, "start() first"
        return self.redis.url

    def redis_env(self) -> dict[str, str]:
        """The LOOPWIRE_REDIS_* settings of the Redis this system runs on."""
        env = {"LOOPWIRE_REDIS_URL": self.get_redis_url()}
        if self.redis_cluster is not None:
            env["LOOPWIRE_REDIS_CLUSTER"] = "true"
        if self.redis_sentinel is not None:
            env["LOOPWIRE_REDIS_SENTINELS"] = self.redis_sentinel.sentinels
            env["LOOPWIRE_REDIS_SENTINEL_MASTER"] = self.redis_sentinel.master_name
        return env

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        """The first loopwire process (the only one, or worker 0, of `up`)."""
        return self.processes[0].proc

    @property
    def metrics_port(self) -> int:
        return self._container_port or self.processes[0].metrics_port

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def process_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWIRE_")}
        env.update({
            "LOOPWIRE_NATS_URL": self.get_nats_url(),
            **self.redis_env(),
            "LOOPWIRE_SUBJECT_PREFIX": self.prefix,
            "LOOPWIRE_METRICS_PORT": str(self.metrics_port),
            "LOOPWIRE_METRICS_HOST": "127.0.0.1",
        })
        if self.nats_cluster is not None:
            env["LOOPWIRE_STREAM_REPLICAS"] = str(min(3, len(self.nats_cluster.nodes)))
        env.update(self.env)
        return env

    # -- the loopwire processes ---------------------------------------------------------------
    def start_loopwire(self) -> None:
        """Start every loopwire process that is not running (all of them at first, or those
        a test killed) and wait until each answers /readyz with 200."""
        if self.image and self.use_docker:
            self._start_container()
            return
        started = [p for p in self.processes if not p.running]
        env = self.process_env()
        for process in started:
            process.launch(env)
        deadline = time.monotonic() + self.ready_timeout
        for process in started:
            process.wait_ready(deadline)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        if self.container is not None:
            self._wait_container(deadline)
            return
        for process in self.processes:
            process.wait_ready(deadline)

    def of_service(self, service: str) -> list[LoopwireProcess]:
        """The processes that run `service` (`router`, ... in the split layout; `up`)."""
        found = [p for p in self.processes if p.service == service]
        if not found:
            raise ValueError(f"no {service!r} process in {[p.command for p in self.processes]}")
        return found

    def kill(self) -> None:
        """kill -9 every loopwire process (and their children): a crash, not a shutdown."""
        for process in self.processes:
            process.kill()

    def kill_service(self, service: str) -> None:
        """kill -9 the processes of one service alone; `start_loopwire()` restarts them."""
        for process in self.of_service(service):
            process.kill()

    def pause_service(self, service: str, index: int = 0) -> None:
        """SIGSTOP one process of a service: it keeps its messages and its connections."""
        self.of_service(service)[index].pause()

    def resume_service(self, service: str, index: int = 0) -> None:
        self.of_service(service)[index].resume()

    def terminate(self, timeout: float = 40.0) -> int:
        """SIGTERM every process and wait: a graceful shutdown. Returns the first non-zero exit
        code, else 0."""
        codes = []
        for process in self.processes:
            if process.running:
                assert process.proc is not None
                process.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in self.processes:
            if process.proc is not None:
                codes.append(process.proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        return next((code for code in codes if code), 0)

    def stop_loopwire(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):
                DockerContainer.stop(self)
            self.container = None
        for process in self.processes:
            process.stop()

    def logs(self) -> str:
        if len(self.processes) == 1:
            return self.processes[0].logs()
        return "".join(f"==> loopwire {p.command} [{n}] <==\n{p.logs()}" for n, p in enumerate(self.processes))

    def _start_container(self) -> None:  # pragma: no cover - needs a Docker engine
        from .servers import free_port

        assert self.image is not None
        # Host networking: the container reaches NATS and Redis at the URLs the test uses.
        self._container_port = free_port()
        env = self.process_env()
        env["LOOPWIRE_METRICS_PORT"] = str(self._container_port)
        env["LOOPWIRE_METRICS_HOST"] = "127.0.0.1"
        self.env = {k: v for k, v in env.items() if k.startswith(("LOOPWIRE_", "ANTHROPIC_", "OTEL_"))}
        self.with_kwargs(network_mode="host")
        DockerContainer.start(self)
        self.container = self
        self.wait_ready()

    def _wait_container(self, deadline: float) -> None:  # pragma: no cover - needs a Docker engine
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.metrics_url}/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        return
            time.sleep(0.1)
        raise TimeoutError(f"loopwire container not ready after {self.ready_timeout}s")
