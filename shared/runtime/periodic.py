"""A background pass every few seconds, for the sweeps a service runs beside its handlers
(the router's watchdog, the tenants' sweep): started with the service, cancelled when it
stops, and a pass that fails (Redis away) is logged and tried again at the next interval."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any


class PeriodicSweep:
    interval_s: float = 10.0
    name: str = "sweep"
    """The task's name and what a failed pass's log line calls it."""
    log: logging.Logger = logging.getLogger("loopwire.runtime")
    _task: asyncio.Task[None] | None = None

    async def sweep(self) -> Any:
        raise NotImplementedError

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.sweep()
            except Exception as exc:  # Redis away: the next pass tries again
                self.log.warning("%s failed: %s", self.name, exc)
