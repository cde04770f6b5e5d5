"""Tool permissions and tool lists as layers that can only get stricter.

Operators decide, clients ask: the operator's `LOOPWIRE_TOOL_POLICY` is the floor, a
strategy config's `tool_permissions` may raise a tool above it, and a run's StartRun
`tool_permissions` may raise it further, never lower it (`auto` < `approve` < `deny`).
A misspelled tool name or permission in a client's request therefore cannot loosen
anything. A strategy config's `tools` list is a floor the same way: a run's own `tools`
may leave tools out of it, never add one (`narrow_tools`).
"""

from __future__ import annotations

from collections.abc import Mapping

STRICTNESS = {"auto": 0, "approve": 1, "deny": 2}


def stricter(a: str, b: str) -> str:
    """The stricter of two permissions (an unknown value counts as `deny`)."""
    return a if STRICTNESS.get(a, 2) >= STRICTNESS.get(b, 2) else b


def merge_permissions(*layers: Mapping[str, str]) -> dict[str, str]:
    """Per tool, the strictest permission any layer gives it (layers in any order)."""
    merged: dict[str, str] = {}
    for layer in layers:
        for name, permission in layer.items():
            merged[name] = stricter(merged[name], permission) if name in merged else permission
    return merged


def narrow_tools(floor: list[str] | None, requested: list[str] | None) -> list[str] | None:
    """The tools a run may use: `requested` within `floor` (None: no restriction)."""
    if floor is None:
        return requested
    if requested is None:
        return list(floor)
    allowed = set(floor)
    return [name for name in requested if name in allowed]
