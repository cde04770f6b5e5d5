"""The walk of one tool-turn (docs/architecture.md) stays within what the docs give: a
change that makes the core's two decisions switch files more often shows here first."""

from __future__ import annotations

from tests.router_driver import Driver, call
from tests.tool_turn_walk import hops, walk

FIRST_DECISION_MAX = 42
SECOND_DECISION_MAX = 26


def test_the_two_decisions_of_a_tool_turn_switch_files_at_most_as_the_docs_say() -> None:
    driver = Driver()
    driver.start(input="add 1 and 2", tools=["add"])
    asking, _ = walk(lambda: driver.answer(call("toolu_1")))
    answered, _ = walk(lambda: driver.tools())
    assert len(asking) - 1 <= FIRST_DECISION_MAX, " -> ".join(asking)
    assert len(answered) - 1 <= SECOND_DECISION_MAX, " -> ".join(answered)
    assert "services/router/core/step_requests.py" in answered, "the walk reached the next generation's request"



HOP_MAX_FILES = 3
"""A send crosses service -> dispatcher -> chain or bus; a result into the router crosses
service -> dispatcher -> the router (or the direct request)."""


def test_a_send_and_a_result_between_services_cross_at_most_three_files() -> None:
    ways = hops()
    assert len(ways) == 4
    for label, files in ways.items():
        assert len(files) <= HOP_MAX_FILES, f"{label}: {' -> '.join(files)}"
        assert files[1] == "shared/runtime/dispatcher.py", label
