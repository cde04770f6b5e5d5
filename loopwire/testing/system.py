"""A whole loopwire for a test suite: NATS, Redis and `loopwire up`, as one object.

    from loopwire.testing import LoopwireContainer

    with LoopwireContainer(env={"ANTHROPIC_BASE_URL": fake.url}) as lw:
        nats_url = lw.get_nats_url()
        ...

NATS and Redis run as testcontainers when a Docker engine answers, and as the
pip-shipped `nats-server` / `redis-server` processes otherwise. loopwire itself runs as a
local `loopwire up` process (or, with `image=`, as a container of that image when Docker
answers). `kill()` / `start_loopwire()` let a test crash and restart it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from .servers import ServerHandle, docker_available, free_ports, start_nats, start_redis


class LoopwireContainer:
    def __init__(self, env: dict[str, str] | None = None, prefix: str = "loopwire",
                 use_docker: bool | None = None, image: str | None = None,
                 services: str = "up", ready_timeout: float = 60.0) -> None:
        self.env = dict(env or {})
        self.prefix = prefix
        self.use_docker = docker_available() if use_docker is None else use_docker
        self.image = image
        self.services = services
        self.ready_timeout = ready_timeout
        self.nats: ServerHandle | None = None
        self.redis: ServerHandle | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.container: Any = None
        self.metrics_port = 0
        self.log_path = Path(tempfile.mkstemp(prefix="loopwire-", suffix=".log")[1])

    # -- testcontainers-style API ---------------------------------------------------------------
    def start(self) -> LoopwireContainer:
        self.nats = start_nats(self.use_docker)
        self.redis = start_redis(self.use_docker)
        self.start_loopwire()
        return self

    def stop(self) -> None:
        self.stop_loopwire()
        for server in (self.nats, self.redis):
            if server is not None:
                server.stop()

    def __enter__(self) -> LoopwireContainer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def get_nats_url(self) -> str:
        assert self.nats is not None, "start() first"
        return self.nats.url

    def get_redis_url(self) -> str:
        assert self.redis is not None, "start() first"
        return self.redis.url

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def process_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWIRE_")}
        env.update({
            "LOOPWIRE_NATS_URL": self.get_nats_url(),
            "LOOPWIRE_REDIS_URL": self.get_redis_url(),
            "LOOPWIRE_SUBJECT_PREFIX": self.prefix,
            "LOOPWIRE_METRICS_PORT": str(self.metrics_port),
            "LOOPWIRE_METRICS_HOST": "127.0.0.1",
        })
        env.update(self.env)
        return env

    # -- the loopwire process -----------------------------------------------------------------
    def start_loopwire(self) -> None:
        """Start (or start again) `loopwire up` and wait until /readyz answers 200."""
        if self.image and self.use_docker:
            self._start_container()
            return
        # `up --workers N`: worker i serves /metrics on port + i, so N adjacent free ports.
        self.metrics_port = self.metrics_port or free_ports(_workers_in(self.services))
        args = [sys.executable, "-m", "loopwire.cli", *self.services.split()]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process owns it
        self.proc = subprocess.Popen(args, env=self.process_env(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"loopwire exited with {self.proc.returncode}:\n{self.logs()[-4000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.metrics_url}/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        return
            time.sleep(0.1)
        raise TimeoutError(f"loopwire not ready after {self.ready_timeout}s:\n{self.logs()[-4000:]}")

    def kill(self) -> None:
        """kill -9 the loopwire process (and its children): a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 40.0) -> int:
        """SIGTERM and wait: a graceful shutdown. Returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop_loopwire(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.stop()
            self.container = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _start_container(self) -> None:  # pragma: no cover - needs a Docker engine
        from testcontainers.core.container import DockerContainer  # type: ignore[import-untyped]

        assert self.image is not None
        env = self.process_env()
        env["LOOPWIRE_METRICS_PORT"] = "9464"
        env["LOOPWIRE_METRICS_HOST"] = "0.0.0.0"
        container = DockerContainer(self.image).with_command(self.services).with_exposed_ports(9464)
        container = container.with_kwargs(network_mode="host")
        for key, value in env.items():
            if key.startswith(("LOOPWIRE_", "ANTHROPIC_", "OTEL_")):
                container = container.with_env(key, value)
        self.container = container.start()
        self.metrics_port = 9464
        self.wait_ready()


def _workers_in(services: str) -> int:
    """N of a `... --workers N` in the command, else 1."""
    words = services.split()
    for n, word in enumerate(words):
        if word == "--workers" and n + 1 < len(words) and words[n + 1].isdigit():
            return max(1, int(words[n + 1]))
        if word.startswith("--workers=") and word.split("=", 1)[1].isdigit():
            return max(1, int(word.split("=", 1)[1]))
    return 1
