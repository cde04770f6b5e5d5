"""Counts what a reader of the router's core follows through one tool-turn: the files its
two decisions pass through (the generation that asks for a tool, then the tool's result),
driven through tests/router_driver.py with a profiler on. docs/architecture.md, "The walk
of one tool-turn", gives the numbers.

    python -m tests.tool_turn_walk        # the counts; -v also prints each walk

A switch is the running code moving from one file of services/ or shared/ to another (a
call or a return); a call into another file is counted once more on its own, as a reader
opening the next file would count it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
