"""Counts what a reader of the router's core follows through one tool-turn: the files its
two decisions pass through (the generation that asks for a tool, then the tool's result),
driven through tests/router_driver.py with a profiler on. docs/architecture.md, "The walk
of one tool-turn", gives the numbers.

    python -m tests.tool_turn_walk        # the counts; -v also prints each walk

A switch is the running code moving from one file of services/ or shared/ to another (a
call or a return); a call into another file is counted once more on its own, as a reader
opening the next file would count it.

It also counts the files a hop between services crosses (`hops`): from the sending
service's call of the dispatcher (shared/runtime/dispatcher.py) to the door the envelope
goes through: the chain's hand-off, the bus's JetStream publish, the direct request, or
the receiving service's handler.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from types import CodeType, FrameType
from typing import Any

from tests.router_driver import Driver, call


def _own(path: str) -> str | None:
    """The repository path of a loopwire source file, None for anything else."""
    if "/site-packages/" in path:
        return None
    for root in ("services/", "shared/"):
        at = path.find("/" + root)
        if at >= 0:
            return path[at + 1:]
    return None


def walk(decision: Callable[[], Any]) -> tuple[list[str], list[tuple[str, str]]]:
    """The files `decision` runs through, in order (consecutive repeats folded), and its
    calls from one file into another."""
    files: list[str] = []
    calls: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event not in ("call", "return"):
            return
        here = _own(frame.f_code.co_filename)
        caller = _own(frame.f_back.f_code.co_filename) if frame.f_back is not None else None
        if event == "call" and here and caller and here != caller:
            calls.append((caller, here))
        now = here if event == "call" else caller
        if now is not None and (not files or files[-1] != now):
            files.append(now)

    sys.setprofile(profile)
    try:
        decision()
    finally:
        sys.setprofile(None)
    return files, calls


def hop(sender: str, send: Callable[[], Awaitable[None]], doors: dict[CodeType, str]) -> list[str]:
    """The files from `sender`'s call of `send` to the first of `doors` entered (a code object
    and the file it stands for), in the order first entered."""
    files = [sender]
    reached = False

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal reached
        if reached or event != "call":
            return
        door = doors.get(frame.f_code)
        here = door or _own(frame.f_code.co_filename)
        if here is not None and here not in files:
            files.append(here)
        reached = door is not None

    sys.setprofile(profile)
    try:
        asyncio.run(send())
    finally:
        sys.setprofile(None)
    assert reached, f"no door reached: {files}"
    return files


def hops() -> dict[str, list[str]]:
    """The files each way between services crosses, with the dispatcher as the services use
    it (ServiceContext.dispatch) and stand-ins for the bus and the receiving services."""
    from nats.errors import NoRespondersError

    from loopwire.shared.contract.envelopes import ExecuteTools, ToolResultItem, ToolsResult
    from loopwire.shared.contract.subjects import Subjects
    from loopwire.shared.runtime import chain, direct_results
    from loopwire.shared.runtime.dispatcher import RESULTS, Dispatcher
    from loopwire.shared.runtime.redelivery import RedeliveryPolicy

    class Bus:
        subjects = Subjects("walk")
        nc = None

        async def publish_work(self, *args: Any, **kwargs: Any) -> None:
            return None

    class Gone:
        """Direct requests to a replica that has gone: the result goes on to JetStream."""

        async def send(self, *args: Any) -> Any:
            raise NoRespondersError

    async def accept_result(result: Any, recover: bool) -> None:
        return None

    async def on_tools(delivery: Any) -> None:
        return None

    def dispatcher(in_process: bool) -> Dispatcher:
        d = Dispatcher(Bus.subjects, policy=RedeliveryPolicy(), replica_id="r1", direct_results=True,
                       chain_max_hops=0, direct_timeout_s=1.0, summary_timeout_s=1.0)
        d._bus = Bus()  # type: ignore[assignment]
        d._direct = Gone()  # type: ignore[assignment]
        d.in_process = in_process
        d.take(Bus.subjects.tools_execute, on_tools)
        d.serve(RESULTS, accept_result)
        return d

    work = ExecuteTools(session_id="s1", run_id="r1", step_id="r1:t1", turn=1, calls=[])
    result = ToolsResult(session_id="s1", run_id="r1", step_id="r1:t1", turn=1,
                         results=[ToolResultItem(tool_use_id="toolu_1", name="add", content="3")])
    router, tools = "services/router/shell/effect_publishing.py", "services/tools/service.py"
    doors = {chain.hand_off.__code__: "shared/runtime/chain.py",
             Bus.publish_work.__code__: "shared/runtime/bus.py",
             direct_results.result_applied.__code__: "shared/runtime/direct_results.py",
             accept_result.__code__: "services/router/shell/service.py"}
    here, apart = dispatcher(True), dispatcher(False)
    return {
        "a send in process (router -> tools, a chain task)":
            hop(router, lambda: here.send(work, msg_id="m1", stored={}), doors),
        "a send between processes (router -> tools, JetStream)":
            hop(router, lambda: apart.send(work, msg_id="m1", stored={}), doors),
        "a result into the router in process (a call)":
            hop(tools, lambda: here.send(result, msg_id="m2", replica="r1"), doors),
        "a result into the router between processes (direct)":
            hop(tools, lambda: apart.send(result, msg_id="m2", replica="r1"), doors),
    }


def main(argv: list[str]) -> int:
    driver = Driver()
    driver.start(input="add 1 and 2", tools=["add"])
    for label, decision in (("the generation that asks for a tool", lambda: driver.answer(call("toolu_1"))),
                            ("the tool's result", lambda: driver.tools())):
        files, calls = walk(decision)
        print(f"{label}: {len(files) - 1} switches, {len(calls)} calls into another file, "
              f"{len(set(files))} files")
        if "-v" in argv:
            print("  " + " -> ".join(files))
    for label, files in hops().items():
        print(f"{label}: {len(files)} files: {' -> '.join(files)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
