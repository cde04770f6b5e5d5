"""The executor with in-process tools: concurrency, order, timeouts, validation, denial,
failures, idempotency, exclusivity and cancellation."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall, ToolResultItem
from loopwire.shared.runtime.inflight import CancelSignal
from loopwire.shared.stores.step_store import InMemoryStepStore
from loopwire.tools.catalog import Catalog
from loopwire.tools.executor import Executor
from loopwire.tools.registry import ToolError, ToolRegistry

pytestmark = pytest.mark.unit


class Probe:
    """Counts calls per tool and the most calls that ever ran at once."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.running = 0
        self.max_running = 0
        self.log: list[str] = []

    def enter(self, name: str) -> None:
        self.calls[name] += 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.log.append(f"start {name}")

    def leave(self, name: str) -> None:
        self.running -= 1
        self.log.append(f"end {name}")


def make_registry(probe: Probe) -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool
    async def nap(label: str, seconds: float = 0.3) -> str:
        probe.enter("nap")
        try:
            await asyncio.sleep(seconds)
        finally:
            probe.leave("nap")
        return f"slept {label}"

    @reg.tool
    def add(a: float, b: float) -> float:
        probe.enter("add")
        probe.leave("add")
        return a + b

    @reg.tool(timeout_s=0.05)
    async def stuck() -> str:
        probe.enter("stuck")
        await asyncio.Event().wait()
        return "never"

    @reg.tool
    def boom(message: str) -> str:
        probe.enter("boom")
        raise RuntimeError(message)

    @reg.tool
    def refuse() -> str:
        probe.enter("refuse")
        raise ToolError("the model should read exactly this")

    @reg.tool(exclusive=True)
    async def solo() -> str:
        probe.enter("solo")
        await asyncio.sleep(0.05)
        probe.leave("solo")
        return "alone"

    @reg.tool
    def structured() -> dict[str, Any]:
        return {"items": [1, 2], "ok": True}

    return reg


def envelope(*calls: ToolCall, denied: dict[str, str] | None = None) -> ExecuteTools:
    return ExecuteTools(session_id="sess", run_id="run", step_id="run:1:t0", turn=1,
                        calls=list(calls), denied=denied or {})


def call(tuid: str, name: str, **inp: Any) -> ToolCall:
    return ToolCall(tool_use_id=tuid, name=name, input=inp)


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def steps() -> InMemoryStepStore:
    return InMemoryStepStore()


@pytest.fixture
def executor(probe: Probe, steps: InMemoryStepStore) -> Executor:
    return Executor(Catalog(make_registry(probe)), steps, None, default_timeout_s=5)


async def test_calls_run_concurrently(executor: Executor, probe: Probe) -> None:
    results = await executor.execute(envelope(call("a", "nap", label="a"), call("b", "nap", label="b")))
    assert probe.max_running == 2
    assert probe.log[:2] == ["start nap", "start nap"]  # both started before either ended
    assert [r.content for r in results] == ["slept a", "slept b"]


async def test_sync_tools_run_concurrently_in_threads(steps: InMemoryStepStore) -> None:
    reg = ToolRegistry()
    barrier = threading.Barrier(2, timeout=3)

    @reg.tool
    def meet(who: str) -> str:
        barrier.wait()  # passes only when both calls are inside at once
        return who

    results = await Executor(Catalog(reg), steps, None, default_timeout_s=5).execute(
        envelope(call("a", "meet", who="a"), call("b", "meet", who="b")))
    assert [(r.content, r.is_error) for r in results] == [("a", False), ("b", False)]


async def test_results_are_in_the_models_order_and_reported_as_they_finish(steps: InMemoryStepStore) -> None:
    reg = ToolRegistry()
    second_done = asyncio.Event()

    @reg.tool
    async def first() -> str:
        await second_done.wait()
        return "1"

    @reg.tool
    async def second() -> str:
        second_done.set()
        return "2"

    reported: list[str] = []

    async def on_result(item: ToolResultItem) -> None:
        reported.append(item.tool_use_id)

    results = await Executor(Catalog(reg), steps, None, default_timeout_s=5).execute(
        envelope(call("t1", "first"), call("t2", "second")), on_result=on_result)
    assert [r.tool_use_id for r in results] == ["t1", "t2"]
    assert [r.content for r in results] == ["1", "2"]
    assert reported == ["t2", "t1"]


async def test_timeout_gives_an_error_result(executor: Executor, probe: Probe) -> None:
    (stuck,) = await executor.execute(envelope(call("t", "stuck")))
    assert stuck.is_error and stuck.content == "tool stuck timed out after 0.05s"
    assert probe.calls["stuck"] == 1


async def test_default_timeout_applies(probe: Probe, steps: InMemoryStepStore) -> None:
    executor = Executor(Catalog(make_registry(probe)), steps, None, default_timeout_s=0.05)
    (slow,) = await executor.execute(envelope(call("t", "nap", label="x", seconds=5)))
    assert slow.is_error and slow.content == "tool nap timed out after 0.05s"


async def test_schema_violation_is_an_error_without_calling(executor: Executor, probe: Probe) -> None:
    wrong_type, missing = await executor.execute(envelope(
        call("t1", "add", a="one", b=2), call("t2", "add", a=1)))
    assert wrong_type.is_error and "invalid input for tool add" in str(wrong_type.content)
    assert "'one' is not of type 'number'" in str(wrong_type.content) and "/a" in str(wrong_type.content)
    assert missing.is_error and "'b' is a required property" in str(missing.content)
    assert probe.calls["add"] == 0


async def test_denied_calls_never_run(executor: Executor, probe: Probe) -> None:
    denied, allowed = await executor.execute(envelope(
        call("t1", "add", a=1, b=2), call("t2", "add", a=2, b=2), denied={"t1": "permission is deny"}))
    assert denied.is_error and "permission is deny" in str(denied.content)
    assert (allowed.content, allowed.is_error) == ("4.0", False)
    assert probe.calls["add"] == 1


async def test_unknown_tool_is_an_error_after_one_refresh(probe: Probe, steps: InMemoryStepStore) -> None:
    refreshes = 0

    async def refresh() -> None:
        nonlocal refreshes
        refreshes += 1

    executor = Executor(Catalog(make_registry(probe)), steps, None, default_timeout_s=5, refresh=refresh)
    missing, other = await executor.execute(envelope(call("t1", "nope"), call("t2", "nope2")))
    assert missing.is_error and missing.content == "unknown tool: nope"
    assert other.content == "unknown tool: nope2"
    assert refreshes == 1


async def test_tool_exceptions_become_error_results(executor: Executor) -> None:
    boom, refuse, structured = await executor.execute(envelope(
        call("t1", "boom", message="disk on fire"), call("t2", "refuse"), call("t3", "structured")))
    assert boom.is_error and boom.content == "tool boom failed: RuntimeError: disk on fire"
    assert refuse.is_error and refuse.content == "the model should read exactly this"
    assert not structured.is_error and structured.content == '{"items":[1,2],"ok":true}'


async def test_recorded_results_are_not_executed_again(executor: Executor, probe: Probe,
                                                       steps: InMemoryStepStore) -> None:
    env = envelope(call("t1", "add", a=1, b=1), call("t2", "nap", label="x", seconds=0.01),
                   call("t3", "stuck"))
    first = await executor.execute(env)
    assert await steps.get(keys.tool_call_step("sess", "t1")) == first[0].model_dump(mode="json")
    assert await steps.get(keys.tool_call_step("sess", "t3")) is not None  # a timeout is a result too
    # A crash lost t2's record: the redelivery runs t2 only.
    del steps.records[keys.tool_call_step("sess", "t2")]
    replayed: list[str] = []

    async def on_result(item: ToolResultItem) -> None:
        replayed.append(item.tool_use_id)

    second = await executor.execute(env, on_result=on_result)
    assert probe.calls == Counter({"add": 1, "nap": 2, "stuck": 1})
    assert second == first
    assert sorted(replayed) == ["t1", "t2", "t3"]  # every result is reported again (events dedup)


async def test_exclusive_tool_runs_alone(executor: Executor, probe: Probe) -> None:
    env = envelope(call("a", "nap", label="a", seconds=0.05), call("b", "solo"),
                   call("c", "nap", label="c", seconds=0.05))
    results = await executor.execute(env)
    assert probe.log == ["start nap", "end nap", "start solo", "end solo", "start nap", "end nap"]
    assert [r.content for r in results] == ["slept a", "alone", "slept c"]


async def test_depends_on_waits_for_earlier_calls(executor: Executor, probe: Probe) -> None:
    later = ToolCall(tool_use_id="b", name="nap", input={"label": "b", "seconds": 0.01}, depends_on=["a"])
    await executor.execute(envelope(call("a", "nap", label="a", seconds=0.05), later))
    assert probe.log == ["start nap", "end nap", "start nap", "end nap"]


async def test_a_call_that_depends_on_a_call_not_in_the_turn_fails_the_turn(executor: Executor,
                                                                            probe: Probe) -> None:
    later = ToolCall(tool_use_id="b", name="nap", input={"label": "b", "seconds": 0.01}, depends_on=["zz"])
    first, second = await executor.execute(envelope(call("a", "nap", label="a", seconds=0.01), later))
    assert probe.log == [], "neither ran"
    assert first.is_error and "nap (b) depends on call zz, which is not in this turn" in str(first.content)
    assert second.is_error


async def test_cancel_stops_inflight_calls_without_recording(executor: Executor, probe: Probe,
                                                             steps: InMemoryStepStore) -> None:
    cancel = CancelSignal()

    async def on_result(item: ToolResultItem) -> None:
        if item.tool_use_id == "fast":
            cancel.set()

    fast, slow = await executor.execute(
        envelope(call("fast", "add", a=1, b=2), call("slow", "nap", label="s", seconds=5)),
        on_result=on_result, cancel=cancel)
    assert not fast.is_error
    assert slow.is_error and slow.content == "tool nap was cancelled"
    assert await steps.get(keys.tool_call_step("sess", "slow")) is None
    assert await steps.get(keys.tool_call_step("sess", "fast")) is not None


async def test_racing_deliveries_agree_on_the_first_recorded_result(steps: InMemoryStepStore) -> None:
    reg = ToolRegistry()

    @reg.tool
    async def flaky() -> str:
        # Another delivery of the same envelope finished this call while we ran it.
        await steps.put(keys.tool_call_step("sess", "t1"), {"tool_use_id": "t1", "name": "flaky", "content": "first",
                                                 "is_error": False})
        return "second"

    (item,) = await Executor(Catalog(reg), steps, None, default_timeout_s=5).execute(envelope(call("t1", "flaky")))
    assert item.content == "first"


async def test_an_in_process_tool_knows_the_call_it_serves() -> None:
    """What a tool forwards when it starts a child run (router/subagent.py): the same ids a
    NATS provider gets as headers, in async and in sync tools alike."""
    from loopwire.tools.registry import current_call

    reg = ToolRegistry()

    async def whose_async() -> dict[str, str]:
        ctx = current_call()
        assert ctx is not None
        return ctx.headers()

    def whose_sync() -> str:
        ctx = current_call()
        return f"{ctx.session_id}/{ctx.tool_use_id}" if ctx else "none"

    reg.add(whose_async)
    reg.add(whose_sync)
    first, second = await Executor(Catalog(reg), InMemoryStepStore(), None, default_timeout_s=5).execute(
        envelope(call("t1", "whose_async"), call("t2", "whose_sync")))
    assert '"Loopwire-Session-Id":"sess"' in str(first.content) and '"Loopwire-Tool-Use-Id":"t1"' in str(first.content)
    assert second.content == "sess/t2"
    assert current_call() is None, "outside a call there is none"


class HeldRecords(InMemoryStepStore):
    """Records wait until `answer` is set, so a test sees what happens while one is written."""

    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()
        self.writing = asyncio.Event()

    async def record_claimed(self, claim_key: str, token: str, key: str, *, value: dict[str, Any],
                             release: bool = False) -> dict[str, Any]:
        self.writing.set()
        await self.answer.wait()
        return await super().record_claimed(claim_key, token, key, value=value, release=release)


async def test_a_single_calls_result_is_handed_over_while_its_record_is_written_under_a_fresh_claim(
        probe: Probe) -> None:
    steps = HeldRecords()
    executor = Executor(Catalog(make_registry(probe)), steps, None, default_timeout_s=5, claim_ttl_s=30)
    handed: list[tuple[list[str], bool]] = []

    async def then(items: list[ToolResultItem]) -> None:
        handed.append(([i.tool_use_id for i in items], steps.answer.is_set()))
        steps.answer.set()  # the record answers once the result is on its way

    results = await asyncio.wait_for(executor.execute(envelope(call("t1", "add", a=1, b=2)), then=then), 5)
    assert handed == [(["t1"], False)], "handed over before its record answered"
    assert await steps.get(keys.tool_call_step("sess", "t1")) == results[0].model_dump(mode="json")
    assert not steps.claims, "the record dropped the claim"


async def test_a_claim_older_than_a_third_of_its_ttl_waits_for_the_record_first(probe: Probe) -> None:
    steps = HeldRecords()
    # The call takes longer than a third of the claim's TTL: a renewal was due, so the claim
    # may have been lost and the record refused; the result waits for the record.
    executor = Executor(Catalog(make_registry(probe)), steps, None, default_timeout_s=5, claim_ttl_s=0.03)
    handed: list[bool] = []

    async def then(items: list[ToolResultItem]) -> None:
        handed.append(steps.answer.is_set())

    running = asyncio.create_task(executor.execute(envelope(call("t1", "nap", label="x", seconds=0.05)), then=then))
    await asyncio.wait_for(steps.writing.wait(), 5)
    await asyncio.sleep(0.05)
    assert handed == [], "nothing handed over while the record is unanswered"
    steps.answer.set()
    await asyncio.wait_for(running, 5)
    assert handed == [True]


async def test_a_batch_of_several_is_handed_over_after_all_its_records(executor: Executor,
                                                                      steps: InMemoryStepStore) -> None:
    handed: list[list[str | None]] = []

    async def then(items: list[ToolResultItem]) -> None:
        handed.append([(await steps.get(keys.tool_call_step("sess", i.tool_use_id)) or {}).get("tool_use_id")
                       for i in items])

    await executor.execute(envelope(call("t1", "add", a=1, b=1), call("t2", "add", a=2, b=2)), then=then)
    assert handed == [["t1", "t2"]]
