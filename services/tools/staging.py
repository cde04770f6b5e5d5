"""The order of one turn's tool calls: each tool's execution hint and dependencies,
turned into what every call waits for, in topological stages.

A tool declares (provider endpoint metadata `loopwire.execution` and
`loopwire.depends_on`; `@tool(execution=..., depends_on=...)` for in-process tools):

- `parallel` (the default): runs beside any other call;
- `sequential`: the turn's sequential calls run one after another, in the model's order
  (parallel calls still run beside them);
- `exclusive`: runs alone: the calls before it finish first, the calls after it wait;
- `depends_on`: tool names; a call of this tool starts after every call of those tools
  in the same turn has finished, wherever the model put them, and is not run when one
  of them failed (its result says which).

A call may also name tool_use ids in `ToolCall.depends_on` (callers that know an order).
Ordering hints only ever point from an earlier call to a later one; dependencies may
point anywhere, so they can form a cycle, and they may name what does not exist (a
tool_use id outside the turn, a tool nobody serves). Either way the turn's workflow
cannot be built, and the whole turn fails: every call gets an error result that says
why (the cycle, the unknown name) and none runs, since running the calls outside the
cycle would carry out part of a plan whose order is wrong. A bad workflow is the
model's to read, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

import orjson

from loopwire.shared.contract.envelopes import ToolCall

Execution = Literal["parallel", "sequential", "exclusive"]
EXECUTIONS: tuple[str, ...] = get_args(Execution)


@dataclass(frozen=True)
class Hint:
    execution: Execution = "parallel"
    depends_on: tuple[str, ...] = ()


def hint_of(tool: Any) -> Hint:
    """A resolved tool's hint (in-process, MCP or provider tool; None: unknown)."""
    if tool is None:
        return Hint()
    execution = getattr(tool, "execution", None) or ("exclusive" if getattr(tool, "exclusive", False) else "parallel")
    return Hint(cast(Execution, execution), tuple(getattr(tool, "depends_on", ()) or ()))


@dataclass
class Staging:
    after: list[set[int]]
    """Per call, the calls that must have finished before it starts."""
    needs: list[set[int]]
    """Per call, the calls it depends on: it is not run when one of them failed."""
    refused: dict[int, str] = field(default_factory=dict)
    """Calls that are never run, with the reason: every call of a turn whose workflow
    cannot be built."""
    stages: list[list[int]] = field(default_factory=list)
    """The calls that can run, in topological stages: each waits only on earlier stages."""


def stage(calls: Sequence[ToolCall], hints: Sequence[Hint],
          known: Callable[[str], bool] | None = None) -> Staging:
    """The stages of `calls`; `known` says whether a tool named in a `depends_on` exists
    (None: every name does)."""
    n = len(calls)
    ids = {c.tool_use_id: i for i, c in enumerate(calls)}
    after: list[set[int]] = [set() for _ in calls]
    needs: list[set[int]] = [set() for _ in calls]
    unknown: list[str] = []
    for i, (call, hint) in enumerate(zip(calls, hints, strict=True)):
        for j in range(i):
            if "exclusive" in (hint.execution, hints[j].execution) or \
                    hint.execution == hints[j].execution == "sequential":
                after[i].add(j)
        wanted = set(hint.depends_on)
        needs[i] |= {j for j, other in enumerate(calls) if j != i and other.name in wanted}
        needs[i] |= {ids[d] for d in call.depends_on if d in ids and ids[d] != i}
        after[i] |= needs[i]
        unknown += [f"{call.name} depends on tool {name}, which no provider serves"
                    for name in hint.depends_on if known is not None and not known(name)]
        unknown += [f"{call.name} ({call.tool_use_id}) depends on call {d}, which is not in this turn"
                    for d in call.depends_on if d not in ids]

    # Kahn's algorithm, layer by layer; what is never freed is in or behind a cycle.
    waiting = [set(a) for a in after]
    placed: set[int] = set()
    stages: list[list[int]] = []
    while True:
        ready = [i for i in range(n) if i not in placed and not waiting[i]]
        if not ready:
            break
        stages.append(ready)
        placed |= set(ready)
        for w in waiting:
            w.difference_update(ready)
    problem = "; ".join(unknown) or next((_cycle_text(calls, after, i) for i in range(n) if i not in placed), None)
    if problem is None:
        return Staging(after=after, needs=needs, stages=stages)
    refused = {i: f"tool {c.name} was not run: this turn's calls cannot be ordered ({problem}), so none of "
                  "them was run" for i, c in enumerate(calls)}
    return Staging(after=after, needs=needs, refused=refused, stages=[])


def _cycle_text(calls: Sequence[ToolCall], after: list[set[int]], i: int) -> str:
    """The cycle call `i` is in or waits behind, named by its tools."""
    cycle = _cycle_from(after, i) or [i]
    return "a dependency cycle: " + " -> ".join(calls[k].name for k in [*cycle, cycle[0]])


def _cycle_from(after: list[set[int]], start: int) -> list[int] | None:
    """A cycle reachable from `start` along `after` edges (a depth-first walk)."""
    path: list[int] = []
    on_path: set[int] = set()
    seen: set[int] = set()

    def walk(node: int) -> list[int] | None:
        path.append(node)
        on_path.add(node)
        seen.add(node)
        for nxt in sorted(after[node]):
            if nxt in on_path:
                return path[path.index(nxt):]
            if nxt not in seen and (found := walk(nxt)) is not None:
                return found
        path.pop()
        on_path.discard(node)
        return None

    return walk(start)


def parse_depends_on(raw: Any) -> tuple[str, ...]:
    """`loopwire.depends_on` metadata: tool names, comma-separated or a JSON list."""
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("["):
            try:
                raw = orjson.loads(text)
            except orjson.JSONDecodeError as exc:
                raise ValueError(f"loopwire.depends_on is not JSON: {exc}") from None
        else:
            return tuple(p.strip() for p in text.split(",") if p.strip())
    if isinstance(raw, list) and all(isinstance(p, str) for p in raw):
        return tuple(p.strip() for p in raw if p.strip())
    raise ValueError("loopwire.depends_on must be tool names, comma-separated or a JSON list")
