"""CPU time of processes, read from /proc (Linux): what each process spent during a phase."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` (all its threads) so far, in seconds."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    fields = stat[stat.rindex(b")") + 2:].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


@dataclass
class CpuWindow:
    """CPU seconds spent by named processes between `start()` and `stop()`."""

    pids: Mapping[str, int]
    before: dict[str, float] | None = None
    spent: dict[str, float] | None = None

    def start(self) -> CpuWindow:
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}
        return self

    def stop(self) -> dict[str, float]:
        assert self.before is not None, "start() first"
        self.spent = {name: cpu_seconds(pid) - self.before[name] for name, pid in self.pids.items()}
        return self.spent


def machine_facts() -> dict[str, str]:
    import platform
    import sys

    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpus": str(os.cpu_count()),
        "cpus_usable": str(len(os.sched_getaffinity(0))),
        "cpu_model": model,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }
