"""JSON encoding used on every wire and in Redis (orjson: ~10x stdlib on 4 KB bodies)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel


def dumps(obj: Any) -> bytes:
    if isinstance(obj, BaseModel):
        return orjson.dumps(obj.model_dump(mode="json", exclude_none=False))
    return orjson.dumps(obj)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)


def now_rfc3339() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
