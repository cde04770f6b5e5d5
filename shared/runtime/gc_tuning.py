"""Python's cyclic garbage collector, tuned for a long-running service.

Measured in `make bench` (docs/bench-notes/history.md): with Python's defaults a
`loopwire up` worker under load spent about a quarter of its CPU in the collector, most of
it in ~37 full collections a minute that each walked the whole heap, ~250,000 objects of
which were made at start-up (modules, pydantic schemas, SDK clients) and live as long as
the process. Two changes took that to ~4%:

- `gc.freeze()` once the services are up: what exists then moves to a permanent generation
  that no collection walks again (it is never garbage; start-up's own garbage is
  collected first).
- Higher thresholds (`LOOPWIRE_GC_THRESHOLDS`, default `100000,20,20` against Python's
  `700,10,10`): most of a turn's objects die young, before a collection sees them, and
  fewer survivors are promoted to be walked again later. Reference cycles are still
  collected, only in larger batches.

The first gen-0 threshold was 20000. Measured again later (docs/bench-notes/history.md;
`gc.callbacks` timing each collection in one `loopwire up` process under 200
sessions), that still cost ~10% of the process's CPU: the generation's count is the
tracked objects made and not yet freed, and 200 sessions' hops in flight hold tens of
thousands of them at once, so it passed 20000 a few times a second, and each collection
walked all those live objects (~14 ms) to find a few dozen in cycles. At 100000 it passed
once in a run of 4,000 tool-turns (~25 ms), for ~0.3%. What waits longer is only garbage in
reference cycles (a few thousand objects in that run); everything else is freed by its
reference count as before. Once a load ends, that garbage and the heap's free blocks are
given back by `IdleCollector` (a router's RSS after the bench's load: 93 MB without it,
84 MB with it and jsonschema left unimported, against 72 MB after start).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import time
from collections.abc import Callable

__all__ = ["IdleCollector", "apply", "log", "parse_thresholds"]

log = logging.getLogger("loopwire.gc")


def parse_thresholds(text: str) -> tuple[int, ...] | None:
    """`"100000,20,20"` -> (100000, 20, 20); empty -> None (Python's defaults stay)."""
    if not text.strip():
        return None
    values = tuple(int(v) for v in text.split(","))
    if not 1 <= len(values) <= 3 or any(v < 0 for v in values):
        raise ValueError(f"GC thresholds are 1 to 3 non-negative integers, not {text!r}")
    return values


def apply(thresholds: str, freeze: bool) -> None:
    """Set the thresholds and, with `freeze`, collect and freeze what exists now. Call
    once the services have started."""
    values = parse_thresholds(thresholds)
    if values is not None:
        gc.set_threshold(*values)
    if freeze:
        gc.collect()
        gc.freeze()
    log.info("gc: thresholds %s, %d objects frozen", gc.get_threshold(), gc.get_freeze_count())


QUIET_SHARE = 0.02
"""A check interval in which the process used less than this share of a core is quiet."""


class IdleCollector:
    """Once a burst of work is over, what it left behind goes back.

    The gen-0 threshold above lets up to 100,000 tracked objects wait between collections,
    and under load that is right. But when the work stops, the count stops rising and the
    garbage in reference cycles waits for the next burst, holding its memory; the heap's
    freed blocks stay with the process as well. So every `interval_s` this looks at the
    process's CPU since the last look: at the first quiet interval (under QUIET_SHARE of a
    core) after a busy one, it runs a full collection and asks glibc to return the free
    parts of its heap (`malloc_trim`). Then nothing until the process has been busy again:
    an idle process spends nothing on it."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.collections = 0
        self._busy = False
        self._cpu = time.process_time()
        self._trim = _malloc_trim()

    def check(self) -> bool:
        """One look (every `interval_s`); True when it collected."""
        cpu, self._cpu = self._cpu, time.process_time()
        quiet = self._cpu - cpu < QUIET_SHARE * self.interval_s
        if not quiet:
            self._busy = True
            return False
        if not self._busy:
            return False
        self._busy = False
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        self.collections += 1
        self._cpu = time.process_time()  # the collection's own CPU is not the next interval's work
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.check()


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's `malloc_trim`, or None where the C library has none (musl, macOS)."""
    try:
        # The process's own symbols, glibc's among them (ctypes.util.find_library would run
        # a subprocess at start-up to find the file).
        return ctypes.CDLL(None).malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None
