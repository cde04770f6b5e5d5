"""The strategy configs' two sources, read by the shell: the file `LOOPWIRE_STRATEGY_FILE`
(read again when it changes) and the Redis hash keys.STRATEGIES (read at every
resolution). What a config is, how the two are merged and how a pair resolves:
core/strategy.py.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from loopwire.shared.contract import keys

from ..core.strategy import StrategyConfig, index, parse_entries, resolve

log = logging.getLogger("loopwire.router.strategy")


def load_file(path: str | os.PathLike[str]) -> list[StrategyConfig]:
    """The configs of a JSON or YAML file (by extension; `.json` is JSON, anything else YAML,
    which also reads JSON)."""
    text = Path(path).read_text()
    raw = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    return parse_entries(raw or [], str(path))



class StrategyStore:
    """The shell's view of both sources: the file is read again when it changes, Redis at
    every resolution (a start is rare next to model calls)."""

    def __init__(self, path: str | None, redis: Any) -> None:
        self.path = path
        self.redis = redis
        self._mtime: float | None = None
        self._file: list[StrategyConfig] = []

    def _file_entries(self) -> list[StrategyConfig]:
        if not self.path:
            return []
        try:
            mtime = os.stat(self.path).st_mtime
        except OSError:
            log.warning("LOOPWIRE_STRATEGY_FILE %s cannot be read", self.path)
            return self._file
        if mtime != self._mtime:
            try:
                self._file = load_file(self.path)
            except (OSError, ValueError, ValidationError, yaml.YAMLError) as exc:
                log.error("LOOPWIRE_STRATEGY_FILE %s rejected: %s", self.path, exc)
            self._mtime = mtime
        return self._file

    async def resolve(self, actor: str | None, expectation: str | None) -> StrategyConfig | None:
        if actor is None:
            return None
        redis_entries = await self.redis.hgetall(keys.STRATEGIES) if self.redis is not None else {}
        return resolve(index(self._file_entries(), redis_entries), actor, expectation)
