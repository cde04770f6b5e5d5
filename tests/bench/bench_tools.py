"""The tools of `make bench`: `noop`, which does nothing, and `wait`, which takes half a
second (the provider-bound pass: a tool that takes time, as real ones do).

Async on purpose: a sync tool runs in a worker thread, and the bench measures loopwire's
path, not a thread hand-off. Loaded with ``LOOPWIRE_TOOL_MODULES=tests.bench.bench_tools``.
"""

from __future__ import annotations

import asyncio

from loopwire.tools.registry import tool

WAIT_S = 0.5


@tool
async def noop(n: int = 0) -> str:
    """Do nothing and say so.

    Args:
        n: which call this is (the bench model counts them, so consecutive calls differ
            and the router's loop detection does not stop the run).
    """
    return "ok"


@tool
async def wait(n: int = 0) -> str:
    """Take half a second, then say so.

    Args:
        n: which call this is (consecutive calls differ, as for `noop`).
    """
    await asyncio.sleep(WAIT_S)
    return "waited"


COST_TOOLS = [f"lookup_{n}" for n in range(10)]
"""The cost pass's ten tools (cost_pass.py): each answers about 500 tokens."""
RESULT_CHARS = 2000


def _lookup(name: str) -> None:
    async def lookup(n: int = 0) -> str:
        return f"{name} record {n}: " + ("figures and notes of the record, " * 60)[:RESULT_CHARS]

    tool(lookup, name=name, description=f"Look up a record in the {name.split('_')[1]}th ledger and return it whole.")


for _name in COST_TOOLS:
    _lookup(_name)
