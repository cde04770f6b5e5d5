"""Operators decide, clients ask: the tool policy is a floor, a strategy config's tools and
permissions are a floor, and ingress refuses what the services would choke on (internal
fields, deep nesting, another protocol version) before anything is stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from loopwire.router.core import inputs as i
from loopwire.router.core.decide import CoreConfig
from loopwire.router.core.ingress import decode_ingress
from loopwire.router.core.strategy import StrategyConfig
from loopwire.router.core.tool_policy import merge_permissions, narrow_tools
from loopwire.shared.contract.events import validate_event
from loopwire.shared.contract.input_guard import deeper_than
from loopwire.shared.contract.protocol import StartRun, TranscriptGetRequest
from loopwire.shared.contract.query_parsing import parse_query
from tests.router_driver import PRICES, Driver, call

pytestmark = pytest.mark.unit

POLICY = CoreConfig(prices=PRICES, default_model="m1", default_max_tokens=1000,
                    tool_policy={"rm": "deny", "deploy": "approve", "add": "auto"})


def decode(verb: str, body: Any) -> i.BaseInput:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return decode_ingress(verb, data, input_id="in:1", new_id="n1", max_bytes=256 * 1024, max_depth=32)


# -- the tool policy --------------------------------------------------------------------------
def test_permissions_only_get_stricter() -> None:
    assert merge_permissions({"rm": "deny"}, {"rm": "auto"}) == {"rm": "deny"}
    assert merge_permissions({"rm": "approve"}, {"rm": "deny"}, {"rm": "auto"}) == {"rm": "deny"}
    assert merge_permissions({}, {"x": "approve"}) == {"x": "approve"}
    assert narrow_tools(["a", "b"], ["b", "c"]) == ["b"]
    assert narrow_tools(["a"], None) == ["a"] and narrow_tools(None, ["z"]) == ["z"]
    assert narrow_tools(None, None) is None


def test_a_run_cannot_loosen_the_operator_policy() -> None:
    d = Driver(cfg=POLICY)
    d.start(tools=["rm", "deploy", "add"], tool_permissions={"rm": "auto", "deploy": "auto", "add": "approve"})
    assert d.run.config.tool_permissions == {"rm": "deny", "deploy": "approve", "add": "approve"}
    out = d.answer(call("t1", "rm", {}), call("t2", "deploy", {}))
    (asked,) = d.of("approval.requested", out)
    assert [c["name"] for c in asked["tool_calls"]] == ["deploy"], "deploy waits for a decision"
    out = d.decision(asked["checkpoint_id"])
    denied = d.work(out)["denied"]
    assert set(denied) == {"t1"} and "denied" in denied["t1"], "rm never runs, deploy does"


def test_a_follow_up_run_gets_the_current_policy_over_its_stored_settings() -> None:
    d = Driver()
    d.start(tool_permissions={"rm": "auto"})
    d.answer("done")
    d.cfg = POLICY  # the operator tightened the policy since
    d.message("again")
    assert d.run.config.tool_permissions["rm"] == "deny"


def test_a_strategy_config_is_a_floor_for_the_run() -> None:
    config = StrategyConfig(actor="ops", tools=["logs", "rm"], tool_permissions={"rm": "approve"})
    d = Driver(cfg=POLICY)
    d.apply(i.StartInput(input_id="in:1", new_id="run1", strategy=config.model_dump(mode="json"), body=StartRun(
        input="x", tools=["rm", "shell"], tool_permissions={"rm": "auto"}, strategy={"actor": "ops"})))
    assert d.run.config.tools == ["rm"], "a run may leave tools of its strategy out, never add one"
    assert d.run.config.tool_permissions["rm"] == "deny"


# -- ignored StartRun fields -------------------------------------------------------------------
def test_run_started_names_the_fields_it_ignored() -> None:
    inp = decode("start", {"input": "x", "tool_permission": {"rm": "deny"}, "limits": {"max_turn": 3}})
    assert isinstance(inp, i.StartInput)
    assert inp.ignored_fields == ["tool_permission", "limits.max_turn"]
    d = Driver()
    out = d.apply(inp)
    started = d.of("run.started", out)[0]
    assert started["ignored_fields"] == ["tool_permission", "limits.max_turn"]
    assert validate_event({"v": 1, "session_id": "s1", "run_id": "n1", "seq": 1, "ts": "t", "kind": "run.started",
                           **started}).ignored_fields == started["ignored_fields"]
    clean = Driver()
    assert "ignored_fields" not in clean.of("run.started", clean.apply(decode("start", {"input": "x"})))[0]


# -- bad input at ingress ----------------------------------------------------------------------
def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


@pytest.mark.parametrize(("verb", "body", "code"), [
    ("start", {"input": [{"role": "user", "content": [{"type": "text", "text": "hi", "loopwire_ref": {}}]}]},
     "internal_field"),
    ("message", {"content": [{"type": "text", "text": "hi", "loopwire_ref": {"sha256": "x", "bytes": 1}}]},
     "internal_field"),
    ("steer", {"content": [{"type": "tool_result", "tool_use_id": "t", "content": [
        {"type": "text", "text": "x", "LOOPWIRE_REF": 1}]}]}, "internal_field"),
    ("start", {"v": 2, "input": "x"}, "unsupported_version"),
    ("start", {"v": "1", "input": "x"}, "unsupported_version"),
    ("abort", {"v": 0}, "unsupported_version"),
    ("message", {"v": True, "content": "x"}, "unsupported_version"),
    ("start", {"input": "x", "metadata": nested(32)}, "body_too_deep"),
    ("start", {"input": "x", "metadata": nested(300)}, "body_too_deep"),
    ("decision", {"checkpoint_id": "c", "decision": "approve", "note": nested(40)}, "body_too_deep"),
])
def test_poison_bodies_are_refused_at_ingress(verb: str, body: Any, code: str) -> None:
    inp = decode(verb, body)
    assert isinstance(inp, i.RejectedInput) and inp.code == code, inp
    out = Driver().apply(inp)
    assert out.state is None and [e.fields["code"] for e in out.effects] == [code]


def test_the_depth_limit_is_exact() -> None:
    assert not deeper_than(nested(32), 32) and deeper_than(nested(33), 32)  # a string leaf adds no level
    ok = decode("start", {"input": "x", "metadata": nested(31)})  # the body + 31 objects: 32 levels
    assert isinstance(ok, i.StartInput)
    assert not deeper_than([[[1]]], 3) and deeper_than([[[[1]]]], 3)


def test_metadata_may_name_loopwire_keys_outside_content() -> None:
    """Only content (what joins the history) is checked: metadata is the client's own."""
    assert isinstance(decode("start", {"input": "x", "metadata": {"loopwire_ref": 1}}), i.StartInput)


def test_queries_refuse_other_versions_and_deep_bodies() -> None:
    assert parse_query(b'{"session_id": "s", "v": 2}', TranscriptGetRequest)["error"]["code"] == "unsupported_version"
    deep = json.dumps({"session_id": "s", "x": nested(40)}).encode()
    assert parse_query(deep, TranscriptGetRequest)["error"]["code"] == "body_too_deep"
    assert isinstance(parse_query(b'{"session_id": "s", "v": 1}', TranscriptGetRequest), TranscriptGetRequest)
