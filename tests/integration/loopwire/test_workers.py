"""Workers of `loopwire up --workers N` as real processes: restarted when they die, killed when they ignore SIGTERM, gone with their parent, each with its own metrics port."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from loopwire.workers import (
    WorkerPool,
)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


async def eventually(check: Callable[[], bool], timeout: float = 20.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)


def all_exist(*paths: Path) -> bool:
    return all(p.exists() for p in paths)


async def test_a_dying_worker_is_restarted_with_a_growing_delay(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "loopwire.workers")
    pool = WorkerPool(2, argv=lambda i: _python("raise SystemExit(3)"), poll_s=0.02,
                      backoff_base_s=0.1, backoff_cap_s=0.4)
    pool.start()
    try:
        await eventually(lambda: pool.workers[0].failures >= 4)
    finally:
        await pool.stop()
    assert pool.workers[0].failures >= 4
    restarts = [r.getMessage() for r in caplog.records if "restarting it in" in r.getMessage()]
    assert "exited with code 3" in restarts[0] and restarts[0].endswith("restarting it in 0.1s")
    assert restarts[3].endswith("restarting it in 0.4s"), "0.1, 0.2, 0.4, then capped at 0.4"


async def test_stop_kills_a_worker_that_ignores_sigterm(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    pool = WorkerPool(3, grace_s=0.5, argv=lambda i: _python(f"""
        import pathlib, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN if {i} == 2 else signal.SIG_DFL)
        pathlib.Path({str(ready)!r} + "{i}").touch()
        time.sleep(60)
    """))
    pool.start()
    await eventually(lambda: all_exist(Path(f"{ready}1"), Path(f"{ready}2")))
    procs = [w.proc for w in pool.workers]
    began = time.monotonic()
    await pool.stop()
    assert time.monotonic() - began < 5
    codes = [p.returncode for p in procs if p is not None]
    assert codes == [-15, -9], "worker 1 stopped on SIGTERM, worker 2 was killed after the grace period"


def test_a_worker_stops_itself_when_its_parent_is_gone(tmp_path: Path) -> None:
    # The parent-pid watch alone (no PR_SET_PDEATHSIG): a grandchild watches the middle
    # process, which exits as soon as the grandchild is ready.
    marker = tmp_path / "stopped"
    grandchild = textwrap.dedent(f"""
        import os, pathlib, signal, threading, time
        from loopwire.workers import _watch_parent
        def on_term(*_):
            pathlib.Path({str(marker)!r}).touch()
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)
        threading.Thread(target=_watch_parent, args=(os.getppid(), 0.05), daemon=True).start()
        print("ready", flush=True)
        time.sleep(30)
    """)
    middle = textwrap.dedent(f"""
        import subprocess, sys
        p = subprocess.Popen([sys.executable, "-c", {grandchild!r}], stdout=subprocess.PIPE)
        p.stdout.readline()
    """)
    subprocess.run([sys.executable, "-c", middle], check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), "the orphaned worker got SIGTERM from its parent watch"


def test_a_container_of_several_workers_gets_adjacent_free_metrics_ports() -> None:
    import socket

    from loopwire.testing.processes import workers_in
    from loopwire.testing.servers import free_ports

    assert [workers_in(s) for s in ("up", "up --workers 3", "up --workers=2 --embedded", "serve router")] == \
        [1, 3, 2, 1]
    port = free_ports(3)
    for p in (port, port + 1, port + 2):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", p))  # each of them is free
