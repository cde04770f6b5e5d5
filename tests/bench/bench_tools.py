"""The one tool of `make bench`: `noop`, which does nothing.

Async on purpose: a sync tool runs in a worker thread, and the bench measures loopwire's
path, not a thread hand-off. Loaded with ``LOOPWIRE_TOOL_MODULES=tests.bench.bench_tools``.
"""

from __future__ import annotations

from loopwire.tools.registry import tool


@tool
async def noop(n: int = 0) -> str:
    """Do nothing and say so.

    Args:
        n: which call this is (the bench model counts them, so consecutive calls differ
            and the router's loop detection does not stop the run).
    """
    return "ok"
