"""Driving the `loopwire` command as a user does: a subprocess, its output read back."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from dataclasses import dataclass

from loopwire.testing import LoopwireContainer


@dataclass
class CliResult:
    code: int
    out: str
    err: str
    seconds: float


def cli_env(nats_url: str, prefix: str = "loopwire") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWIRE_")}
    env.update({"LOOPWIRE_NATS_URL": nats_url, "LOOPWIRE_SUBJECT_PREFIX": prefix, "COLUMNS": "200"})
    return env


async def loopwire_cli(*args: str, nats_url: str, stdin: str | None = None, timeout: float = 60.0) -> CliResult:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "loopwire.cli", *args, env=cli_env(nats_url),
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
    except TimeoutError:
        proc.kill()
        out, err = await proc.communicate()
        raise AssertionError(f"loopwire {' '.join(args)} still running after {timeout}s:\n"
                             f"{out.decode()}\n{err.decode()}") from None
    assert proc.returncode is not None
    return CliResult(proc.returncode, out.decode(), err.decode(), time.monotonic() - started)


async def on_system(system: LoopwireContainer, *args: str, **kwargs: object) -> CliResult:
    return await loopwire_cli(*args, nats_url=system.get_nats_url(), **kwargs)  # type: ignore[arg-type]
