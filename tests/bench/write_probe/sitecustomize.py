"""Loaded by every Python process started with this folder on PYTHONPATH (tests/bench/write_cost.py):
times nats-py's socket writes with the thread's CPU. SIGUSR2 starts the count, SIGUSR1 writes
it to LW_BENCH_WRITE_PROBE/<pid>.json. Inert unless that variable is set."""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

OUT = os.environ.get("LW_BENCH_WRITE_PROBE")

if OUT:
    from nats.aio import transport

    out_dir: str = OUT

    counts = {"writes": 0, "cpu_s": 0.0, "bytes": 0}
    _writelines = transport.TcpTransport.writelines

    def writelines(self: Any, payload: list[bytes]) -> None:
        started = time.thread_time()
        _writelines(self, payload)
        counts["cpu_s"] += time.thread_time() - started
        counts["writes"] += 1
        counts["bytes"] += sum(len(part) for part in payload)

    def start(*_: Any) -> None:
        counts.update(writes=0, cpu_s=0.0, bytes=0, process_cpu_s=time.process_time())

    def write(*_: Any) -> None:
        done = {**counts, "process_cpu_s": time.process_time() - counts.get("process_cpu_s", 0.0)}
        path = os.path.join(out_dir, f"{os.getpid()}.json")
        with open(path + ".part", "w") as f:
            json.dump(done, f)
        os.replace(path + ".part", path)

    transport.TcpTransport.writelines = writelines  # type: ignore[method-assign]
    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGUSR1, write)
