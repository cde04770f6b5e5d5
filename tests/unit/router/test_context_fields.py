"""Context fields (StartRun `user_id`, `metadata.workspace_id`) reach the tool batches, and
the tools a run may use (`tools_active`) follow its offer, through the router's pure core."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from loopwire.router.core import inputs as i
from loopwire.shared.contract.protocol import FollowUp, StartRun
from loopwire.tools.invoke import context_headers
from tests.router_driver import Driver, call

pytestmark = pytest.mark.unit


def start(d: Driver, catalog: list[str] | None, **body: object) -> None:
    body.setdefault("input", "please help")
    d.apply(i.StartInput(input_id="in:0", new_id="run1", body=StartRun.model_validate(body), catalog_tools=catalog))


def test_user_and_workspace_ids_go_with_every_tool_batch() -> None:
    d = Driver()
    start(d, ["add"], tools=["add"], user_id="user-42", metadata={"workspace_id": "ws-7", "workspace": None})
    d.answer(call("t1"))
    work = d.work()
    assert work["kind"] == "tools.execute" and (work["user_id"], work["workspace_id"]) == ("user-42", "ws-7")
    assert d.of("run.started")[0]["config"]["user_id"] == "user-42"
    assert context_headers("user-42", "ws-7") == {"Loopwire-User-Id": "user-42", "Loopwire-Workspace-Id": "ws-7"}
    assert context_headers(None, None) == {}


def test_a_user_id_that_cannot_be_a_header_is_refused_and_a_workspace_id_left_out() -> None:
    for bad in ("", "a\r\nInjected: yes", "x" * 257, "é"):
        with pytest.raises(ValidationError):
            StartRun.model_validate({"input": "hi", "user_id": bad})
    d = Driver()
    start(d, ["add"], tools=["add"], metadata={"workspace_id": "bad\nid"})
    d.answer(call("t1"))
    assert d.work()["workspace_id"] is None


def test_tools_active_follows_discovery_policy_and_the_phase() -> None:
    d = Driver()
    start(d, ["add", "mul", "rm"], profile="agentic_planned", tools=["add", "rm", "gone"],
          tool_permissions={"rm": "deny"})
    assert d.run.tools.active == ["update_plan"], "the plan phase offers only update_plan"
    d.answer(call("p1", "update_plan", {"plan": [{"step": "add", "status": "pending"}]}))
    assert d.run.tools.active == ["add", "update_plan", "finish_agentic_task"], \
        "known to the catalog (not `gone`), not denied (not `rm`), with the phase's reserved tools"


def test_a_run_naming_no_tools_has_the_catalogs_and_none_without_tools() -> None:
    d = Driver()
    start(d, ["add", "mul"])
    assert d.run.tools.active == ["add", "mul", "finish_agentic_task"]
    d.answer("Hello.")
    d.apply(i.MessageInput(input_id="in:9", new_id="follow", body=FollowUp(content="again"), catalog_tools=["add"]))
    assert d.run.tools.active == ["add", "finish_agentic_task"], "a follow-up's run: the catalog as it is then"
    chat = Driver()
    start(chat, ["add"], profile="conversational")
    assert chat.run.tools.active == []
    unread = Driver()
    start(unread, None, tools=["add"])
    assert unread.run.tools.active == ["add", "finish_agentic_task"], "catalog unread: the run's own list"


def test_an_external_agents_step_carries_the_context_fields() -> None:
    d = Driver()
    start(d, ["add"], profile="claude_code", tools=["add"], user_id="user-42", metadata={"workspace_id": "ws-7"})
    executor = d.work()["executor"]
    assert (executor["user_id"], executor["workspace_id"]) == ("user-42", "ws-7")
