"""CPU time of processes, read from /proc (Linux): what each process spent during a phase."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat from field 3 (state) on; OSError when there is no such process."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    return stat[stat.rindex(b")") + 2:].decode().split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` (all its threads) so far, in seconds."""
    fields = stat_fields(pid)
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / CLK_TCK


def cpu_seconds_with_children(pid: int) -> float:
    """`cpu_seconds` of `pid` and of the processes it forked: those that ended and were
    waited for (cutime + cstime, fields 16 and 17 of proc(5)) and those still running. A
    server's child is its own work: Redis forks one for each AOF rewrite, which it waits
    for within a tenth of a second of its end, and under the bench's load that child takes
    a fifth of a core for a second or more at a time."""
    fields = stat_fields(pid)
    total = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / CLK_TCK
    for child in children_of(pid):
        try:
            total += cpu_seconds_with_children(child)
        except OSError:  # it ended in between: its time is in the parent's once waited for
            continue
    return total


def children_of(pid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = stat_fields(int(entry))
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            out.append(int(entry))
    return sorted(out)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent not idle (all CPUs), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / CLK_TCK  # guest time is already inside user


def other_busy_processes(exclude: set[int], min_share: float = 0.05) -> list[str]:
    """Processes not in `exclude` that used more than `min_share` of a core since they
    started (a rough look for a noisy neighbour, e.g. a test suite running alongside)."""
    import time

    out = []
    boot = time.time() - float(open("/proc/uptime").read().split()[0])
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        cpu = (int(fields[11]) + int(fields[12])) / CLK_TCK
        age = time.time() - (boot + int(fields[19]) / CLK_TCK)
        if age > 1 and cpu / age > min_share:
            out.append(f"{cmd[:60] or entry} ({100 * cpu / age:.0f}% of a core)")
    return out


FORKING = ("redis-server",)
"""Processes whose children count as theirs (by label prefix): the servers'. Not the
bench client's, nor `loopwire up`'s, whose children are the processes measured beside
them."""


def window_cpu_seconds(label: str, pid: int) -> float:
    return cpu_seconds_with_children(pid) if label.startswith(FORKING) else cpu_seconds(pid)


@dataclass
class CpuWindow:
    """CPU seconds spent by named processes between `start()` and `stop()`, a server's with
    the children it forked (`FORKING`)."""

    pids: Mapping[str, int]
    before: dict[str, float] | None = None
    spent: dict[str, float] | None = None
    machine_before: float = 0.0
    machine_spent: float = 0.0
    """CPU seconds of the whole machine (ours and everybody else's) in the window."""

    def start(self) -> CpuWindow:
        self.before = {name: window_cpu_seconds(name, pid) for name, pid in self.pids.items()}
        self.machine_before = machine_busy_seconds()
        return self

    def stop(self) -> dict[str, float]:
        assert self.before is not None, "start() first"
        self.machine_spent = machine_busy_seconds() - self.machine_before
        self.spent = {name: window_cpu_seconds(name, pid) - self.before[name] for name, pid in self.pids.items()}
        return self.spent

    @property
    def others(self) -> float:
        """CPU seconds spent by processes outside `pids` during the window."""
        assert self.spent is not None, "stop() first"
        return max(0.0, self.machine_spent - sum(self.spent.values()))


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
        "git": git_revision(),
        "cpus": str(os.cpu_count()),
        "cpus_usable": str(len(os.sched_getaffinity(0))),
        "cpu_model": model,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
    }


def git_revision() -> str:
    """`<short sha>` of the checkout, `+ local changes` when the tree is dirty (read only)."""
    import subprocess

    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha} + local changes" if dirty else sha
