"""The published catalog is owned per tools process: a process that is gone (killed, or
started again with other tools) leaves nothing on offer, and one process starting never
removes what a live sibling serves."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.shared.contract import keys
from loopwire.shared.stores.tool_catalog import read_catalog
from loopwire.tools.catalog import Catalog
from loopwire.tools.registry import ToolRegistry

MAX_AGE = 60.0


def catalog_of(owner: str, names: list[str], running: set[str]) -> Catalog:
    registry = ToolRegistry()
    for name in names:
        registry.add(lambda: "ok", name=name, description=f"the tool {name}")

    async def alive(other: str) -> bool:
        return other in running

    return Catalog(registry, owner=owner, alive=alive)


@pytest.fixture
async def redis(redis_client: Any) -> Any:
    await redis_client.delete(keys.TOOL_CATALOG, keys.TOOL_CATALOG_OWNERS)
    return redis_client


async def test_a_process_started_again_replaces_its_predecessor_and_keeps_its_siblings(redis: Any) -> None:
    running = {"first", "sibling"}
    first = catalog_of("first", ["calc__echo", "shared"], running)
    sibling = catalog_of("sibling", ["other__echo", "shared"], running)
    await first.publish(redis, MAX_AGE)
    await sibling.publish(redis, MAX_AGE)
    assert set(await read_catalog(redis, MAX_AGE)) == {"calc__echo", "other__echo", "shared"}

    # `first` is killed (no withdraw) and started again with another server.
    running.discard("first")
    running.add("second")
    second = catalog_of("second", ["calchttp__echo"], running)
    await second.publish(redis, MAX_AGE)
    assert set(await read_catalog(redis, MAX_AGE)) == {"calchttp__echo", "other__echo", "shared"}, \
        "the predecessor's own tool is gone at once; the sibling's, and the one it shares, stay"
    assert set(await redis.hkeys(keys.TOOL_CATALOG_OWNERS)) == {b"second", b"sibling"}
    assert b"calc__echo" not in await redis.hkeys(keys.TOOL_CATALOG)

    # The sibling stops: what only it served leaves with it.
    await sibling.withdraw(redis, MAX_AGE)
    assert set(await read_catalog(redis, MAX_AGE)) == {"calchttp__echo"}


async def test_readers_hide_an_owner_nobody_has_pruned_once_its_listing_is_old(redis: Any) -> None:
    gone = catalog_of("gone", ["old__echo"], set())
    await gone.publish(redis, MAX_AGE, now=1000.0)
    assert set(await read_catalog(redis, MAX_AGE)) == set(), "its listing and its entry are past the age"
    fresh_entry_old_listing = catalog_of("late", ["late__echo"], set())
    await fresh_entry_old_listing.publish(redis, MAX_AGE)
    assert set(await read_catalog(redis, MAX_AGE)) == {"late__echo"}
    assert set(await redis.hkeys(keys.TOOL_CATALOG_OWNERS)) == {b"late"}, "the stale listing was pruned"


async def test_a_sibling_that_does_not_answer_in_time_keeps_its_tools(redis: Any) -> None:
    async def unsure(other: str) -> bool:
        return True  # a timeout proves nothing: only no-responders says gone

    slow = catalog_of("slow", ["slow__echo"], set())
    await slow.publish(redis, MAX_AGE)
    starting = Catalog(ToolRegistry(), owner="starting", alive=unsure)
    await starting.publish(redis, MAX_AGE)
    assert set(await read_catalog(redis, MAX_AGE)) == {"slow__echo"}
