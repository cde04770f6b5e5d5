"""Loaded by every Python process started with this folder on PYTHONPATH
(tests/bench/call_count.py): SIGUSR2 starts cProfile, SIGUSR1 stops it and writes its stats
to LW_BENCH_CALL_PROBE/<pid>.prof. Inert unless that variable is set."""

from __future__ import annotations

import os
import signal
from typing import Any

OUT = os.environ.get("LW_BENCH_CALL_PROBE")

if OUT:
    import cProfile

    out_dir: str = OUT
    running: list[cProfile.Profile] = []

    def start(*_: Any) -> None:
        profile = cProfile.Profile()
        running[:] = [profile]
        profile.enable()

    def stop(*_: Any) -> None:
        if running:
            profile = running.pop()
            profile.disable()
            path = os.path.join(out_dir, f"{os.getpid()}.prof")
            profile.dump_stats(path + ".part")
            os.replace(path + ".part", path)

    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGUSR1, stop)
