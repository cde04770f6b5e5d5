"""An agent's process: started in a process group of its own, read line by line, stopped
with everything it started.

Coding agents start shells, language servers, MCP servers, test runners; stopping only
the agent would leave those running. So the agent leads a new session (its own process
group), and stopping it signals the group and every descendant found under it in /proc
(a tool may have moved its children into a group of their own): SIGTERM, then SIGKILL
after a grace period.

If the llm process itself dies (kill -9, OOM), nothing is left to stop the agent: it is
started with the parent-death signal (Linux `PR_SET_PDEATHSIG`, SIGKILL), so the kernel
stops it with its parent, and the step redelivered elsewhere is the only one running.
What the agent had started and that outlives it is left to the kernel's orphan handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

log = logging.getLogger("loopwire.llm.executors")

LINE_LIMIT = 64 * 1024 * 1024
"""Longest line an agent may write (a tool result can be large)."""
STDERR_KEPT = 50
"""Lines of the agent's stderr kept for the error message when it fails."""
GRACE_S = 2.0


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """Every process under `pid` (children first found through /proc's `children` lists)."""
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        for task in _tasks(parent):
            try:
                children = Path(f"/proc/{parent}/task/{task}/children").read_text().split()
            except OSError:
                continue
            for child in children:
                if child.isdigit() and int(child) not in found:
                    found.append(int(child))
                    todo.append(int(child))
    return found


def _tasks(pid: int) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"  # a zombie has stopped already


class AgentProcess:
    """One agent program; `lines()` yields its stdout lines, `write()` feeds its stdin."""

    def __init__(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> None:
        self.argv = argv
        self.cwd = cwd
        self.env = dict(env)
        self.proc: asyncio.subprocess.Process | None = None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_KEPT)
        self._stderr_task: asyncio.Task[None] | None = None
        self._known: set[int] = set()
        """Descendants seen while it ran (a process whose parent died is re-parented
        away from the tree, so the tree is sampled while it is whole)."""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, cwd=str(self.cwd), env=self.env, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
            start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        self._stderr_task = asyncio.create_task(self._drain_stderr())

    async def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                return
            self.stderr_tail.append(line.decode("utf-8", "replace").rstrip())

    async def lines(self) -> AsyncIterator[bytes]:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                return
            self._note_tree()
            yield line

    def _note_tree(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self._known.update(descendants(self.proc.pid))

    async def write(self, data: bytes) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(data)
        await self.proc.stdin.drain()

    def close_stdin(self) -> None:
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()

    async def wait(self, timeout: float | None = None) -> int | None:
        if self.proc is None:
            return None
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                return await self.proc.wait()
        return None

    async def stop(self) -> None:
        """The agent and everything it started, gone (SIGTERM, then SIGKILL)."""
        proc = self.proc
        if proc is None:
            return
        self.close_stdin()
        if proc.returncode is None:
            self._note_tree()
        targets = self._known | set(descendants(proc.pid) if proc.returncode is None else [])
        for sig in (signal.SIGTERM, signal.SIGKILL):
            self._signal(proc.pid, targets, sig)
            deadline = asyncio.get_running_loop().time() + GRACE_S
            while asyncio.get_running_loop().time() < deadline:
                if proc.returncode is not None and not any(alive(p) for p in targets):
                    break
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await proc.wait()
            else:
                continue
            break
        with contextlib.suppress(ProcessLookupError, OSError):
            await asyncio.wait_for(proc.wait(), GRACE_S)
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task

    @staticmethod
    def _signal(leader: int, targets: set[int], sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, sig)  # the agent's own group (start_new_session)
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
