"""`loopwire up --workers N`: N processes on one machine, each running all five services.

One process is one asyncio event loop, so a lone `loopwire up` uses one core. Every
consumer is a durable JetStream consumer shared through a deliver group, and every
session change is a Redis compare-and-set, so N copies of `loopwire up` are correct
replicas of each other (as the `loopwire serve NAME` layout and Kubernetes replicas are).
This module only supervises them:

- the parent is worker 0 (the only one that starts embedded servers and runs the demo);
  it starts workers 1..N-1 as `python -m loopwire.cli up --worker-index i` children in its
  own process group, so killing the group (what a crash test does) kills them all;
- worker i serves /metrics, /healthz and /readyz on LOOPWIRE_METRICS_PORT + i; the
  parent's /readyz says only whether the parent is ready;
- a child that exits while the parent is not stopping is restarted after a back-off that
  doubles (0.5 s up to 30 s) while it keeps dying young, so a crash loop does not spin;
- SIGTERM/SIGINT to the parent: SIGTERM to every child, the parent's own graceful stop
  alongside, then the children are waited for (SIGKILL after the grace period);
- a child stops itself when the parent dies without stopping it (SIGKILL, OOM killer):
  PR_SET_PDEATHSIG on Linux, and a parent-pid watch everywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loopwire.settings import Settings

log = logging.getLogger("loopwire.workers")

BACKOFF_BASE_S = 0.5
"""First restart delay of a worker that died."""
BACKOFF_CAP_S = 30.0
"""The delay doubles per consecutive early death up to this."""
STABLE_AFTER_S = 30.0
"""A worker that ran this long was healthy: its next death starts the back-off afresh."""
GRACE_S = 35.0
"""How long stopping children may take before SIGKILL: a worker's own graceful stop is
bounded by its drain (LOOPWIRE_DRAIN_TIMEOUT_S, 20 s by default) plus closing connections,
and it has to end before the 40 s that compose and the chart allow the whole container."""
POLL_S = 0.2
"""How often the parent looks at its children (restarts are seconds apart anyway)."""


def restart_delay(failures: int, base_s: float = BACKOFF_BASE_S, cap_s: float = BACKOFF_CAP_S) -> float:
    """Delay before restarting a worker that died `failures` times in a row (>= 1)."""
    if failures < 1:
        raise ValueError(f"failures must be >= 1, got {failures}")
    return min(cap_s, base_s * 2 ** min(failures - 1, 32))  # the min() keeps the power small


def next_failures(failures: int, uptime_s: float, stable_after_s: float = STABLE_AFTER_S) -> int:
    """The count of early deaths in a row after a death at `uptime_s` seconds."""
    return 1 if uptime_s >= stable_after_s else failures + 1


def metrics_port(base: int, index: int) -> int:
    """Worker `index`'s /metrics port: base + index; 0 (no HTTP server) stays 0."""
    return base + index if base else 0


def describe_ports(base: int, count: int) -> str:
    """One line for the logs: which worker serves /metrics where."""
    if not base:
        return "no metrics server (LOOPWIRE_METRICS_PORT=0)"
    return "metrics on " + ", ".join(f":{metrics_port(base, i)} (worker {i})" for i in range(count))


def child_argv(count: int, index: int, parent_pid: int) -> list[str]:
    """A worker's command: never --embedded or --demo, those are the parent's alone."""
    return [sys.executable, "-m", "loopwire.cli", "up", "--workers", str(count),
            "--worker-index", str(index), "--parent-pid", str(parent_pid)]


def child_env(settings: Settings, log_level: str) -> dict[str, str]:
    """The parent's environment plus what `loopwire up` changed in its settings after
    reading them (--demo adds the demo tool module; a worker without it could not run a
    call routed to it, and it logs at the demo's quieter level)."""
    env = dict(os.environ)
    env.update({
        "LOOPWIRE_NATS_URL": settings.nats_url,
        "LOOPWIRE_REDIS_URL": settings.redis_url,
        "LOOPWIRE_TOOL_MODULES": json.dumps(settings.tool_modules),
        "LOOPWIRE_LOG_LEVEL": log_level,
    })
    return env


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float | None = None


class WorkerPool:
    """Workers 1..count-1 of `loopwire up --workers count`, run from the parent's event loop.

    Use from the main thread: PR_SET_PDEATHSIG fires when the *thread* that forked the
    child ends, so children must not be started from a worker thread.
    """

    def __init__(self, count: int, env: dict[str, str] | None = None, *,
                 argv: Callable[[int], list[str]] | None = None, grace_s: float = GRACE_S,
                 poll_s: float = POLL_S, backoff_base_s: float = BACKOFF_BASE_S,
                 backoff_cap_s: float = BACKOFF_CAP_S) -> None:
        self.count = count
        self.env = env
        # Worker i's command; the default is `loopwire up` (tests pass other programs).
        self.argv = argv or (lambda index: child_argv(count, index, os.getpid()))
        self.grace_s = grace_s
        self.poll_s = poll_s
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.workers = [_Worker(i) for i in range(1, count)]
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self.workers if w.proc is not None]

    def start(self) -> None:
        for worker in self.workers:
            self._spawn(worker)
        self._task = asyncio.get_running_loop().create_task(self._supervise(), name="worker-pool")

    def _spawn(self, worker: _Worker) -> None:
        worker.restart_at = None
        worker.started_at = time.monotonic()
        try:
            # stdout/stderr are inherited: one log for all workers. No new session or
            # process group: the group is the unit a supervisor (or a test) kills.
            worker.proc = subprocess.Popen(self.argv(worker.index), env=self.env, stdin=subprocess.DEVNULL)
        except OSError as exc:
            worker.proc = None
            self._schedule_restart(worker, f"could not start: {exc}")
            return
        log.info("worker %d started (pid %d)", worker.index, worker.proc.pid)

    def _schedule_restart(self, worker: _Worker, why: str) -> None:
        worker.failures = next_failures(worker.failures, time.monotonic() - worker.started_at)
        delay = restart_delay(worker.failures, self.backoff_base_s, self.backoff_cap_s)
        worker.restart_at = time.monotonic() + delay
        log.warning("worker %d %s; restarting it in %.1fs", worker.index, why, delay)

    async def _supervise(self) -> None:
        # Polling rather than SIGCHLD: nothing to install in the loop, and a restart is
        # due seconds later anyway.
        while not self._stopping:
            for worker in self.workers:
                if worker.proc is not None:
                    code = worker.proc.poll()
                    if code is not None:
                        pid, worker.proc = worker.proc.pid, None
                        uptime = time.monotonic() - worker.started_at
                        self._schedule_restart(worker, f"(pid {pid}) exited with {_exit_text(code)} "
                                                       f"after {uptime:.1f}s")
                elif worker.restart_at is not None and time.monotonic() >= worker.restart_at:
                    self._spawn(worker)
            await asyncio.sleep(self.poll_s)

    async def stop(self) -> None:
        """SIGTERM every child at once, then wait for them; SIGKILL after the grace period."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
        procs = [w.proc for w in self.workers if w.proc is not None]
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline:
            if all(p.poll() is not None for p in procs):
                break
            await asyncio.sleep(0.1)
        for proc in procs:
            if proc.poll() is None:
                log.warning("worker pid %d did not stop within %.0fs; killing it", proc.pid, self.grace_s)
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait()  # reaps it: no zombie, no pid left behind
        log.info("%d worker process(es) stopped", len(procs))


def die_with_parent(parent_pid: int) -> None:
    """In a child: stop (SIGTERM, the graceful path) when the parent is gone."""
    if sys.platform.startswith("linux"):
        try:
            pr_set_pdeathsig = 1  # <linux/prctl.h>
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):  # best effort: the watch below covers it
            pass
    # The parent may have died before prctl ran, and other systems have no PDEATHSIG.
    threading.Thread(target=_watch_parent, args=(parent_pid,), name="parent-watch", daemon=True).start()


def _watch_parent(parent_pid: int, interval_s: float = 1.0) -> None:
    while os.getppid() == parent_pid:
        time.sleep(interval_s)
    log.warning("parent process %d is gone; stopping", parent_pid)
    os.kill(os.getpid(), signal.SIGTERM)
