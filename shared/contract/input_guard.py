"""Checks every client body passes before it is decoded into the contract's models.

What pydantic validation alone lets through and the services would then fail on, again
on every delivery:

- nesting deeper than `LOOPWIRE_MAX_BODY_DEPTH` (32): valid JSON that validates, but
  that the services cannot serialise again (`too_deep`);
- a `v` other than 1 (`unsupported_version`);
- loopwire's own fields inside content blocks: keys starting with `loopwire` (such as
  `loopwire_ref`, the reference to a stored large content, shared/stores/blobs.py) are made
  and read by loopwire alone; one from a client would be taken for loopwire's own
  (`internal_field_paths`);
- fields the contract does not know are ignored (docs/protocol.md), but the ingress
  names them (`unknown_fields`), so a typo such as `tool_permission` is visible in
  `run.started` instead of silently meaning "no permissions".
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel

from loopwire.shared.contract.protocol import PROTOCOL_VERSION

INTERNAL_PREFIX = "loopwire"


def deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests objects and arrays more than `limit` levels (iterative, so a
    body deep enough to exhaust the stack is measured too)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


def version_problem(raw: dict[str, Any]) -> str | None:
    """Why the body's `v` is not supported (None: absent or 1)."""
    if "v" not in raw:
        return None
    v = raw["v"]
    if isinstance(v, int) and not isinstance(v, bool) and v == PROTOCOL_VERSION:
        return None
    return f"protocol version {v!r} is not supported; this server speaks \"v\": {PROTOCOL_VERSION}"


def internal_field_paths(value: Any, path: str = "") -> list[str]:
    """Where `value` (content, or anything holding content blocks) carries a key that
    only loopwire may set, as `input.0.content.1.loopwire_ref`-style paths."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                at = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and key.lower().startswith(INTERNAL_PREFIX):
                    found.append(at)
                stack.append((child, at))
        elif isinstance(item, list):
            stack.extend((child, f"{where}.{n}" if where else str(n)) for n, child in enumerate(item))
    return sorted(found)


def unknown_fields(raw: dict[str, Any], model: type[BaseModel], path: str = "") -> list[str]:
    """Keys of `raw` that `model` does not declare, and (one level down) those of its
    fields that are models themselves (`limits.max_turn`)."""
    unknown: list[str] = []
    for key, value in raw.items():
        field = model.model_fields.get(key)
        if field is None:
            unknown.append(f"{path}{key}")
            continue
        annotation = field.annotation
        if isinstance(value, dict) and isinstance(annotation, type) and issubclass(annotation, BaseModel) \
                and not path:
            unknown += unknown_fields(value, annotation, f"{key}.")
    return unknown
