"""The router's watchdog (services/router/shell/watchdog.py) against a real Redis: a run whose
step makes no progress for longer than the limit is ended through the core; progress, an
ended run, or a run between steps is left alone."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.config import executor_stall_after, stall_after
from loopwire.router.shell.watchdog import Watchdog, note_status
from loopwire.settings import Settings
from loopwire.shared.contract import keys
from loopwire.shared.stores.session_store import RedisSessionStore
from tests.router_driver import Driver, call

pytestmark = pytest.mark.integration


async def store_state(store: RedisSessionStore, driver: Driver, version: int) -> int:
    assert await store.commit(driver.state.session_id, version, driver.state.dump_json(), history_len_before=0, append=[])
    return version + 1


async def test_a_stalled_step_is_ended_and_progress_resets_the_clock(redis_client: Any) -> None:
    store = RedisSessionStore(redis_client)
    applied: list[tuple[str, i.BaseInput]] = []

    async def apply(sid: str, inp: i.BaseInput) -> None:
        applied.append((sid, inp))

    stuck, moving, idle = Driver(sid="stuck"), Driver(sid="moving"), Driver(sid="idle")
    for d in (stuck, moving, idle):
        d.start()
    stuck.answer("Adding.", call("t1"))  # waits for its tool step
    versions = {d.state.session_id: await store_state(store, d, 0) for d in (stuck, moving)}
    idle.abort()
    await store_state(store, idle, 0)
    for sid in ("stuck", "moving", "idle"):
        await note_status(redis_client, sid, True)

    dog = Watchdog(redis_client, apply, store.load, stall_after_s=10)
    assert await dog.sweep(now=100.0) == []
    moving.answer("Adding.", call("t9"))  # progress: a new state version
    versions["moving"] = await store_state(store, moving, versions["moving"])
    assert await dog.sweep(now=109.0) == []
    assert await dog.sweep(now=111.0) == ["stuck"]
    ((sid, inp),) = applied
    assert sid == "stuck" and isinstance(inp, i.UndeliverableInput)
    assert inp.run_id == "run1" and inp.step_id == stuck.run.pending_step
    assert inp.input_id == f"stalled:run1:{versions['stuck']}", "every replica sends the same input"
    members = {m.decode() for m in await redis_client.zrange(keys.RUNNING, 0, -1)}
    assert "idle" not in members, "a session that is not running leaves the index"
    # `moving` last moved at 109: stalled by 125 too (the fake apply ended nothing).
    assert sorted(await dog.sweep(now=125.0)) == ["moving", "stuck"]


async def test_an_agents_turn_is_held_to_the_executor_limit_not_the_models(redis_client: Any) -> None:
    store = RedisSessionStore(redis_client)
    applied: list[str] = []

    async def apply(sid: str, inp: i.BaseInput) -> None:
        applied.append(sid)

    agent, model = Driver(sid="agent"), Driver(sid="model")
    agent.start(profile="claude_code")  # its step is the agent's whole turn
    model.start()
    for d in (agent, model):
        await store_state(store, d, 0)
        await note_status(redis_client, d.state.session_id, True)
    dog = Watchdog(redis_client, apply, store.load, stall_after_s=10, executor_stall_after_s=100)
    assert await dog.sweep(now=0.0) == []
    assert await dog.sweep(now=50.0) == ["model"], "a model step is held to the model's limit"
    assert await dog.sweep(now=99.0) == ["model"]
    assert sorted(await dog.sweep(now=101.0)) == ["agent", "model"], "an agent's turn to its own"


def test_the_limit_is_the_tolerance_or_the_longest_step() -> None:
    assert stall_after(Settings(outage_tolerance_s=300, llm_timeout_s=60, tool_timeout_s=120, ack_wait_s=30)) == 300
    assert stall_after(Settings(outage_tolerance_s=10, llm_timeout_s=600, tool_timeout_s=120, ack_wait_s=30)) == 630
    # an agent's turn (LOOPWIRE_EXECUTOR_TIMEOUT_S) lengthens only the executor runs' limit
    long_agents = Settings(outage_tolerance_s=300, llm_timeout_s=60, tool_timeout_s=120, ack_wait_s=30,
                           executor_timeout_s=3600)
    assert stall_after(long_agents) == 300
    assert executor_stall_after(long_agents) == 3630
    assert executor_stall_after(Settings(outage_tolerance_s=300, llm_timeout_s=60, tool_timeout_s=120,
                                        executor_timeout_s=60, ack_wait_s=30)) == 300
