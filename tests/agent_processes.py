"""Processes as the executor tests look for them in /proc: an agent and the commands it
runs all have the run's workspace as their working directory, so a workspace that no
process has any more means the agent's whole tree is gone."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def processes_in(path: Path) -> list[int]:
    """Pids of the processes whose working directory is `path`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry}/cwd") == str(path):
                    found.append(int(entry))
    return found


def cmdline(pid: int) -> str:
    """The command line of `pid`, "" once it is gone."""
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    return ""
