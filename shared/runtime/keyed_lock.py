"""Per-key asyncio locks that disappear when unused.

Inside one process, inputs of the same session are applied one at a time: the version
compare-and-set would keep them correct anyway, but serialising them locally turns
conflicts (reload, decide again) into waiting.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

__all__ = ["KeyedLock"]


class KeyedLock:
    def __init__(self) -> None:
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    def hold(self, key: str) -> Held:
        """`async with locks.hold(key):` the key's lock, held for the block."""
        return Held(self._locks, key)


class Held:
    """One holding of a key's lock. A class rather than an `asynccontextmanager`: it is
    taken twice per tool-turn, and the generator's machinery cost more than the lock."""

    __slots__ = ("_locks", "_key", "_lock")

    def __init__(self, locks: dict[str, tuple[asyncio.Lock, int]], key: str) -> None:
        self._locks = locks
        self._key = key
        self._lock: asyncio.Lock | None = None

    async def __aenter__(self) -> None:
        lock, users = self._locks.get(self._key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[self._key] = (lock, users + 1)
        try:
            await lock.acquire()
        except BaseException:  # cancelled while waiting: not a user any more
            self._leave()
            raise
        self._lock = lock

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._lock is not None
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        lock, users = self._locks[self._key]
        if users <= 1:
            del self._locks[self._key]
        else:
            self._locks[self._key] = (lock, users - 1)
