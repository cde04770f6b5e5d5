"""Staging one turn's tool calls from execution hints and dependencies (staging.py),
the metadata that declares them, and the executor honouring them with in-process tools:
dependency cycles and failed dependencies become error results, never a hang."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall
from loopwire.shared.stores.step_store import InMemoryStepStore
from loopwire.tools.catalog import Catalog
from loopwire.tools.discovery import parse_service_info
from loopwire.tools.executor import Executor
from loopwire.tools.registry import ToolRegistry
from loopwire.tools.staging import Hint, parse_depends_on, stage

pytestmark = pytest.mark.unit


def calls(*names: str) -> list[ToolCall]:
    return [ToolCall(tool_use_id=f"t{n}", name=name) for n, name in enumerate(names)]


def test_parallel_calls_are_one_stage() -> None:
    plan = stage(calls("a", "b", "c"), [Hint()] * 3)
    assert plan.stages == [[0, 1, 2]] and not plan.refused


def test_sequential_calls_follow_each_other_and_parallel_ones_run_beside() -> None:
    s, p = Hint("sequential"), Hint()
    plan = stage(calls("s", "p", "s", "p", "s"), [s, p, s, p, s])
    assert plan.stages == [[0, 1, 3], [2], [4]]
    assert plan.after[4] == {0, 2}


def test_an_exclusive_call_runs_alone() -> None:
    p, x = Hint(), Hint("exclusive")
    plan = stage(calls("p", "x", "p", "p"), [p, x, p, p])
    assert plan.stages == [[0], [1], [2, 3]]


def test_a_dependency_on_a_tool_waits_for_its_calls_wherever_they_are() -> None:
    plan = stage(calls("deploy", "build", "build", "lint"),
                 [Hint(depends_on=("build",)), Hint(), Hint(), Hint()])
    assert plan.stages == [[1, 2, 3], [0]]
    assert plan.needs[0] == {1, 2}


def test_a_dependency_cycle_fails_the_whole_turn() -> None:
    plan = stage(calls("a", "b", "c", "p"),
                 [Hint(depends_on=("b",)), Hint(depends_on=("a",)), Hint(depends_on=("a",)), Hint()])
    assert plan.stages == [], "nothing runs, not even the call outside the cycle"
    assert set(plan.refused) == {0, 1, 2, 3}
    assert all("cannot be ordered (a dependency cycle: a -> b -> a)" in r for r in plan.refused.values())
    assert plan.refused[3].startswith("tool p was not run")


@pytest.mark.parametrize(("batch_deps", "hints", "why"), [
    ({0: ["t9"]}, [Hint(), Hint()], "a (t0) depends on call t9, which is not in this turn"),
    ({}, [Hint(depends_on=("buidl",)), Hint()], "a depends on tool buidl, which no provider serves"),
])
def test_an_unknown_dependency_fails_the_whole_turn(batch_deps: dict[int, list[str]], hints: list[Hint],
                                                    why: str) -> None:
    batch = calls("a", "b")
    for i, deps in batch_deps.items():
        batch[i].depends_on = deps
    plan = stage(batch, hints, known=lambda name: name in ("a", "b"))
    assert plan.stages == [] and set(plan.refused) == {0, 1}
    assert all(why in r for r in plan.refused.values())


def test_a_dependency_on_a_known_tool_the_turn_does_not_call_is_no_problem() -> None:
    plan = stage(calls("deploy"), [Hint(depends_on=("build",))], known=lambda name: True)
    assert plan.stages == [[0]] and not plan.refused


def test_exclusive_order_against_a_dependency_is_a_cycle_too() -> None:
    plan = stage(calls("x", "b"), [Hint("exclusive", depends_on=("b",)), Hint()])
    assert set(plan.refused) == {0, 1}


def test_call_ids_can_name_dependencies() -> None:
    batch = calls("a", "b")
    batch[0].depends_on = ["t1"]
    assert stage(batch, [Hint(), Hint()]).stages == [[1], [0]]


@pytest.mark.parametrize(("raw", "names"), [
    (None, ()), ("", ()), ("build", ("build",)), ("build, test", ("build", "test")),
    ('["build", "test"]', ("build", "test")), (["a"], ("a",)),
])
def test_depends_on_metadata(raw: Any, names: tuple[str, ...]) -> None:
    assert parse_depends_on(raw) == names


@pytest.mark.parametrize("raw", ['["build"', "[1, 2]", 7])
def test_bad_depends_on_metadata_is_refused(raw: Any) -> None:
    with pytest.raises(ValueError, match="depends_on"):
        parse_depends_on(raw)


def endpoint(name: str, **meta: str) -> dict[str, Any]:
    return {"name": name, "subject": f"svc.{name}", "metadata": {"loopwire.tool": name, **meta}}


def test_discovery_reads_the_hints_and_ignores_a_bad_one() -> None:
    warnings: list[str] = []
    info = {"id": "i1", "name": "svc", "endpoints": [
        endpoint("a"), endpoint("b", **{"loopwire.execution": "sequential", "loopwire.depends_on": "a"}),
        endpoint("c", **{"loopwire.exclusive": "true"}), endpoint("d", **{"loopwire.execution": "whenever"}),
        endpoint("e", **{"loopwire.depends_on": "[broken"})]}
    tools = {t.name: t for t in parse_service_info(info, warn=warnings.append)}
    assert sorted(tools) == ["a", "b", "c"]
    assert (tools["a"].execution, tools["b"].execution, tools["c"].execution) == ("parallel", "sequential", "exclusive")
    assert tools["b"].depends_on == ("a",) and tools["c"].exclusive
    assert len(warnings) == 2 and "'whenever' is not one of parallel, sequential, exclusive" in warnings[0]


def test_an_in_process_tool_refuses_an_unknown_hint() -> None:
    with pytest.raises(ValueError, match="execution 'later'"):
        ToolRegistry().add(lambda: None, name="t", execution="later")


def envelope(*batch: ToolCall) -> ExecuteTools:
    return ExecuteTools(session_id="s", run_id="r", step_id="r:1:t0", turn=1, calls=list(batch))


async def test_the_executor_refuses_a_turn_with_a_cycle_whole() -> None:
    reg = ToolRegistry()
    ran: list[str] = []

    @reg.tool(depends_on=["b"])
    def a() -> str:
        ran.append("a")
        return "a"

    @reg.tool(depends_on=["a"])
    def b() -> str:
        ran.append("b")
        return "b"

    @reg.tool
    def ok() -> str:
        ran.append("ok")
        return "fine"

    executor = Executor(Catalog(reg), InMemoryStepStore(), None, default_timeout_s=5)
    batch = [ToolCall(tool_use_id=f"t{n}", name=name) for n, name in enumerate(["a", "b", "ok"])]
    results = await asyncio.wait_for(executor.execute(envelope(*batch)), 5)
    assert ran == [], "no call of the turn ran"
    assert [r.tool_use_id for r in results] == ["t0", "t1", "t2"] and all(r.is_error for r in results)
    assert all("a dependency cycle: a -> b -> a" in str(r.content) for r in results)


async def test_the_executor_skips_calls_whose_dependency_failed_and_runs_the_rest() -> None:
    reg = ToolRegistry()
    ran: list[str] = []

    @reg.tool
    def fails() -> str:
        ran.append("fails")
        raise RuntimeError("broken build")

    @reg.tool(depends_on=["fails"])
    def deploy() -> str:
        ran.append("deploy")
        return "deployed"

    @reg.tool(depends_on=["nobody_serves_this"])
    def orphan() -> str:
        return "never"

    @reg.tool
    def ok() -> str:
        ran.append("ok")
        return "fine"

    executor = Executor(Catalog(reg), InMemoryStepStore(), None, default_timeout_s=5)
    batch = [ToolCall(tool_use_id=f"t{n}", name=name) for n, name in enumerate(["deploy", "fails", "ok"])]
    results = await asyncio.wait_for(executor.execute(envelope(*batch)), 5)
    by_name = {r.name: r for r in results}
    assert sorted(ran) == ["fails", "ok"]
    assert by_name["deploy"].is_error and "depends on fails (t1), which failed" in str(by_name["deploy"].content)
    assert not by_name["ok"].is_error
    (refused, other) = await executor.execute(envelope(ToolCall(tool_use_id="o1", name="orphan"),
                                                       ToolCall(tool_use_id="o2", name="ok")))
    assert refused.is_error and other.is_error and "tool nobody_serves_this, which no provider serves" in \
        str(other.content)
