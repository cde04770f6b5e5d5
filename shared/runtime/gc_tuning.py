"""Python's cyclic garbage collector, tuned for a long-running service.

Measured in `make bench` (docs/benchmarks.md, "Third pass"): with Python's defaults a
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

The first gen-0 threshold was 20000. Measured again later (docs/benchmarks.md, "Tenth
pass"; `gc.callbacks` timing each collection in one `loopwire up` process under 200
sessions), that still cost ~10% of the process's CPU: the generation's count is the
tracked objects made and not yet freed, and 200 sessions' hops in flight hold tens of
thousands of them at once, so it passed 20000 a few times a second, and each collection
walked all those live objects (~14 ms) to find a few dozen in cycles. At 100000 it passed
once in a run of 4,000 tool-turns (~25 ms), for ~0.3%. What waits longer is only garbage in
reference cycles (a few thousand objects in that run); everything else is freed by its
reference count as before.
"""

from __future__ import annotations

import gc
import logging

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
