"""Python's cyclic garbage collector, tuned for a long-running service.

Measured in `make bench` (docs/benchmarks.md, "Third pass"): with Python's defaults a
`loopwire up` worker under load spent about a quarter of its CPU in the collector, most of
it in ~37 full collections a minute that each walked the whole heap, ~250,000 objects of
which were made at start-up (modules, pydantic schemas, SDK clients) and live as long as
the process. Two changes took that to ~4%:

- `gc.freeze()` once the services are up: what exists then moves to a permanent generation
  that no collection walks again (it is never garbage; start-up's own garbage is
  collected first).
- Higher thresholds (`LOOPWIRE_GC_THRESHOLDS`, default `20000,20,20` against Python's
  `700,10,10`): most of a turn's objects die young, before a collection sees them, and
  fewer survivors are promoted to be walked again later. Reference cycles are still
  collected, only in larger batches.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("loopwire.gc")


def parse_thresholds(text: str) -> tuple[int, ...] | None:
    """`"20000,20,20"` -> (20000, 20, 20); empty -> None (Python's defaults stay)."""
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
