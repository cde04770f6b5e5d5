"""`loopwire up --embedded`: start nats-server and redis-server from the pip packages when
nothing answers at the configured URLs, so a fresh machine needs no system services.

Data lives under LOOPWIRE_DATA_DIR (default ./.run): JetStream with `sync_interval:
always`, Redis with an append-only file, so `make run` twice keeps its sessions.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from loopwire.shared.runtime.credentials import display_url
from loopwire.testing.servers import nats_server_binary, redis_server_binary, wait_port

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", ""}


def reachable(host: str, port: int, timeout: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host or "127.0.0.1", port), timeout=timeout):
        return True
    return False


@dataclass
class EmbeddedServers:
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    started: list[str] = field(default_factory=list)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def ensure_servers(nats_url: str, redis_url: str, data_dir: str = ".run") -> EmbeddedServers:
    """Start what does not answer; every file the servers write (data, config, logs) goes
    under `data_dir` (LOOPWIRE_DATA_DIR), whatever the working directory."""
    out = EmbeddedServers()
    base = Path(data_dir).resolve()
    nats = urlparse(nats_url.split(",")[0])
    nats_port = nats.port or 4222
    if not reachable(nats.hostname or "127.0.0.1", nats_port):
        if (nats.hostname or "") not in LOCAL_HOSTS:
            raise RuntimeError(f"NATS at {display_url(nats_url)} does not answer and is not local; start it first")
        store = base / "nats"
        store.mkdir(parents=True, exist_ok=True)
        conf = base / "nats.conf"
        conf.write_text(f'listen: "127.0.0.1:{nats_port}"\n'
                        f'jetstream {{ store_dir: "{store}", sync_interval: always }}\n')
        proc = subprocess.Popen([nats_server_binary(), "-c", str(conf)],
                                stdout=subprocess.DEVNULL, stderr=open(base / "nats.log", "ab"))  # noqa: SIM115
        wait_port(nats_port, proc=proc)
        out.procs.append(proc)
        out.started.append(f"nats-server on 127.0.0.1:{nats_port} (data in {store})")
    redis = urlparse(redis_url)
    redis_port = redis.port or 6379
    if not reachable(redis.hostname or "127.0.0.1", redis_port):
        if (redis.hostname or "") not in LOCAL_HOSTS:
            out.stop()
            raise RuntimeError(f"Redis at {display_url(redis_url)} does not answer and is not local; start it first")
        rdir = base / "redis"
        rdir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.Popen(
            [redis_server_binary(), "--port", str(redis_port), "--bind", "127.0.0.1", "--dir", str(rdir),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
             "--logfile", str(base / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(redis_port, proc=proc)
        out.procs.append(proc)
        out.started.append(f"redis-server on 127.0.0.1:{redis_port} (data in {rdir})")
    return out
