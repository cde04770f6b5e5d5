"""The strategy store reads its file and Redis (services/router/shell/strategy_store.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopwire.router.shell.strategy_store import StrategyStore
from loopwire.shared.contract import keys
from tests.unit.router.test_strategy import ENTRIES


@pytest.mark.integration
async def test_the_store_reads_the_file_and_redis(tmp_path: Path, redis_client: Any) -> None:
    path = tmp_path / "strategies.json"
    path.write_text(json.dumps(ENTRIES))
    store = StrategyStore(str(path), redis_client)
    assert (await store.resolve("ops", "report")).role == "You write reports."
    await redis_client.hset(keys.STRATEGIES, "ops/report", json.dumps({"actor": "ops", "expectation": "report",
                                                                 "role": "Defined at run time."}))
    await redis_client.hset(keys.STRATEGIES, "new", json.dumps({"actor": "new-actor", "role": "New."}))
    assert (await store.resolve("ops", "report")).role == "You write reports.", "the file wins"
    assert (await store.resolve("new-actor", "anything")).role == "New."
    assert (await store.resolve("ops", "triage")).role == "You triage incidents."
    assert await store.resolve(None, "x") is None
    assert await StrategyStore(None, redis_client).resolve("ops", "triage") is None
    assert (await StrategyStore(None, redis_client).resolve("ops", "report")).role == "Defined at run time.", \
        "without the file, the Redis hash"
