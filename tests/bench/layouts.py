"""The layouts `make bench` measures, and the servers they run on.

Each layout is a set of loopwire processes (loopwire.testing's LoopwireContainer with a
layout of commands) on the bench's own nats-server and redis-server, started once per run
on free ports with the durability compose and Helm deploy: JetStream with
`sync_interval: always`, Redis with `appendonly yes` and `appendfsync everysec`
(loopwire.testing.start_nats / start_redis). nats-server also serves its monitoring port,
for the message counts of wire.py.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from loopwire.launcher import SERVICE_NAMES
from loopwire.testing import LAYOUTS, LoopwireContainer, ServerHandle, free_port, start_nats, start_redis

from .procstat import children_of

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class BenchLayout:
    key: str
    name: str
    commands: tuple[str, ...]
    target_ratio: float | None = None
    """Single-session p50 at most this many times the durable floor's (the issue's target)."""
    target_turns_per_s: float | None = None


def bench_layouts(workers: int = 2) -> dict[str, BenchLayout]:
    one_router = tuple(f"serve {name}" for name in SERVICE_NAMES)
    return {
        "up": BenchLayout("up", "loopwire up", LAYOUTS["up"]),
        "workers": BenchLayout("workers", f"loopwire up --workers {workers}", (f"up --workers {workers}",),
                               target_ratio=1.5, target_turns_per_s=700.0),
        "split1": BenchLayout("split1", "5 × loopwire serve (1 router)", one_router,
                              target_ratio=2.0, target_turns_per_s=400.0),
        "split": BenchLayout("split", "6 × loopwire serve (2 routers)", LAYOUTS["split"],
                             target_ratio=2.0, target_turns_per_s=400.0),
    }


LAYOUT_ORDER = ("up", "workers", "split1", "split")


def service_env() -> dict[str, str]:
    return {
        "LOOPWIRE_LLM_PROVIDER": "scripted",
        "LOOPWIRE_TOOL_MODULES": "tests.bench.bench_tools",
        "LOOPWIRE_LOG_LEVEL": "WARNING",
        # The 200-turn session of the Redis-bytes measurement: the agentic profile allows
        # 100 generations per outer iteration.
        "LOOPWIRE_MAX_INNER_ITERATIONS": "1000",
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
    }


@dataclass
class Servers:
    nats: ServerHandle
    redis: ServerHandle
    monitor_url: str

    def pids(self) -> dict[str, int]:
        return {"nats-server": self.nats.proc.pid, "redis-server": self.redis.proc.pid}  # type: ignore[union-attr]

    def stop(self) -> None:
        self.nats.stop()
        self.redis.stop()


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
        self.part = LoopwireContainer(env=service_env(), use_docker=False, layout=layout.commands, ready_timeout=300)
        self.part.nats, self.part.redis = servers.nats, servers.redis

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
