"""Subagent depth: a child run's depth from its parent (or the forwarded call's headers),
the limit, and the child's start body."""

from typing import Any

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core import subagent
from loopwire.shared.contract.protocol import StartRun
from tests.router_driver import Driver

pytestmark = pytest.mark.unit


# -- subagent depth -----------------------------------------------------------------------------
def child(depth_claimed: int | None = None, parent_depth: int | None = None) -> i.StartInput:
    meta: dict[str, Any] = {"parent_session_id": "p1", "parent_tool_use_id": "tu1"}
    if depth_claimed is not None:
        meta["subagent_depth"] = depth_claimed
    return i.StartInput(input_id="in:1", new_id="c1", body=StartRun(input="sub task", metadata=meta),
                        parent_depth=parent_depth)


def test_a_child_run_tracks_its_depth_from_the_parent() -> None:
    d = Driver()
    out = d.apply(child(depth_claimed=1, parent_depth=1))
    started = d.of("run.started", out)[0]
    assert (started["parent_session_id"], started["parent_tool_use_id"], started["subagent_depth"]) == ("p1", "tu1", 2)
    assert d.run.config.subagent_depth == 2


def test_a_start_beyond_the_depth_limit_is_an_error() -> None:
    d = Driver()
    out = d.apply(child(depth_claimed=1, parent_depth=3))  # the parent's depth wins over the claim
    assert out.state is None and d.of("error", out)[0]["code"] == "subagent_depth_exceeded"
    out = Driver().apply(child(depth_claimed=4))  # unknown parent: the claim counts
    assert out.state is None
    assert subagent.child_depth({}, None, 5) == 0, "not a child run"


def test_the_parent_may_come_from_the_forwarded_call_headers() -> None:
    headers = subagent.child_headers("p1", "tu1")
    assert subagent.parent_of({}, headers) == "p1"
    assert subagent.parent_of({"parent_session_id": "p0"}, headers) == "p0"
    d = Driver()
    out = d.apply(i.StartInput(input_id="in:1", new_id="c1", body=StartRun(input="sub task"),
                               parent_session_id="p1", parent_depth=3))
    assert d.of("error", out)[0]["code"] == "subagent_depth_exceeded", "no metadata, the header still counts"
    d.apply(i.StartInput(input_id="in:2", new_id="c2", body=StartRun(input="sub task"),
                         parent_session_id="p1", parent_depth=0))
    assert d.run.config.subagent_depth == 1 and d.of("run.started")[-1]["parent_session_id"] == "p1"


def test_a_child_session_keeps_its_depth_when_started_again_without_the_fields() -> None:
    d = Driver()
    d.apply(child(parent_depth=2))  # input in:1
    d._seq = 1
    assert d.run.config.subagent_depth == 3
    d.answer("done")
    d.start(run_id="again")  # no parent_session_id, no header: the session's record counts
    assert d.run.config.subagent_depth == 3
    d.answer("done")
    out = d.apply(i.StartInput(input_id="in:9", new_id="deeper", body=StartRun(input="x"),
                               parent_session_id="p1", parent_depth=3))
    assert d.of("error", out)[0]["code"] == "subagent_depth_exceeded"


def test_child_start_body_is_a_valid_start_run() -> None:
    body = subagent.child_start("p1", "tu1", 0, "look into it", profile="agentic", metadata={"k": "v"})
    start = StartRun.model_validate(body)
    assert start.metadata == {"k": "v", "parent_session_id": "p1", "parent_tool_use_id": "tu1", "subagent_depth": 1}
