"""The in-process tool registry, schema derivation, result shaping and info parsing."""

from __future__ import annotations

import asyncio
import sys
import threading
import types
from datetime import date
from typing import Annotated, Any

import orjson
import pytest
from pydantic import BaseModel, Field

from loopwire.tools.discovery import ProviderTable, parse_service_info
from loopwire.tools.invoke import call_python, parse_reply, to_content
from loopwire.tools.registry import ToolError, ToolRegistry, load_modules, parse_docstring

pytestmark = pytest.mark.unit


def test_schema_from_signature_with_types_defaults_and_docs() -> None:
    reg = ToolRegistry()

    @reg.tool
    def search(query: str, limit: int = 10, tags: list[str] | None = None,
               mode: Annotated[str, Field(description="fast or deep")] = "fast") -> list[str]:
        """Search the notes.

        Longer explanation.

        Args:
            query: What to look for.
            limit: At most this many
                results.
        Returns:
            The matches.
        """
        return []

    spec = reg.get("search")
    assert spec is not None
    assert spec.description == "Search the notes.\n\nLonger explanation."
    schema = spec.input_schema
    assert schema["type"] == "object"
    assert schema["required"] == ["query"]
    assert "title" not in schema
    props = schema["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {"type": "integer", "default": 10, "description": "At most this many results."}
    assert props["mode"]["description"] == "fast or deep"
    assert props["tags"]["default"] is None
    # The derived schema is a valid JSON Schema that our validator accepts.
    assert spec.validator.is_valid({"query": "x", "limit": 3})
    assert not spec.validator.is_valid({"limit": 3})
    assert not spec.validator.is_valid({"query": "x", "unknown": 1})


def test_decorator_forms_and_options() -> None:
    reg = ToolRegistry()

    @reg.tool("renamed")
    def a() -> None: ...

    @reg.tool(name="b2", description="custom", exclusive=True, timeout_s=3)
    async def b(x: int) -> int:
        return x

    schema = {"type": "object", "properties": {"n": {"type": "number"}}}

    @reg.tool(input_schema=schema)
    def c(**kwargs: Any) -> Any:
        return kwargs

    assert "renamed" in reg and "a" not in reg
    b_spec = reg.get("b2")
    assert b_spec is not None and b_spec.description == "custom" and b_spec.exclusive and b_spec.timeout_s == 3
    c_spec = reg.get("c")
    assert c_spec is not None and c_spec.input_schema is schema and c_spec.input_model is None
    assert b_spec.fn is b  # the decorator returns the function itself
    assert len(reg) == 3


@pytest.mark.parametrize("name", ["has space", "x" * 65, "", "finish_agentic_task"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError):
        ToolRegistry().add(lambda: None, name=name)


def test_varargs_need_an_explicit_schema() -> None:
    with pytest.raises(ValueError, match="input_schema"):
        ToolRegistry().add(lambda *args: None, name="v")


async def test_sync_tools_run_in_a_thread_and_async_tools_on_the_loop() -> None:
    reg = ToolRegistry()
    loop_thread = threading.get_ident()

    @reg.tool
    def sync_tool() -> int:
        return threading.get_ident()

    @reg.tool
    async def async_tool() -> int:
        await asyncio.sleep(0)
        return threading.get_ident()

    sync_spec, async_spec = reg.get("sync_tool"), reg.get("async_tool")
    assert sync_spec is not None and async_spec is not None
    assert await sync_spec.call({}) != loop_thread
    assert await async_spec.call({}) == loop_thread


class Point(BaseModel):
    x: int
    y: int


async def test_arguments_are_converted_to_the_parameter_types() -> None:
    reg = ToolRegistry()

    @reg.tool
    def describe(day: date, at: Point) -> str:
        return f"{day.isoformat()} {at.x + at.y}"

    spec = reg.get("describe")
    assert spec is not None
    assert await spec.call({"day": "2025-01-02", "at": {"x": 1, "y": 2}}) == "2025-01-02 3"
    with pytest.raises(ToolError, match="day"):
        await spec.call({"day": "not a date", "at": {"x": 1, "y": 2}})


def test_load_modules_imports_and_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = ToolRegistry()
    module = types.ModuleType("lw_test_tool_module")

    def ping() -> str:
        return "pong"

    module.ping = reg.tool(ping)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lw_test_tool_module", module)
    assert load_modules([" lw_test_tool_module ", ""]) == ["lw_test_tool_module"]
    with pytest.raises(ModuleNotFoundError):
        load_modules(["lw_no_such_module_anywhere"])


def test_docstring_parsing() -> None:
    summary, params = parse_docstring("Do it.\n\nArgs:\n    a (int): first\n    b: second\n        line two\n")
    assert summary == "Do it."
    assert params == {"a": "first", "b": "second line two"}


@pytest.mark.parametrize(("value", "expected"), [
    ("text", "text"),
    (None, ""),
    (3, "3"),
    ({"a": [1, 2]}, '{"a":[1,2]}'),
    ([1, 2], "[1,2]"),
    ([{"type": "text", "text": "hi"}], [{"type": "text", "text": "hi"}]),
])
def test_results_become_content(value: Any, expected: Any) -> None:
    assert to_content(value) == expected


def test_provider_replies_are_mapped() -> None:
    ok = parse_reply(b'{"content": "3", "is_error": false}', {})
    assert (ok.content, ok.is_error) == ("3", False)
    blocks = parse_reply(b'{"content": [{"type": "text", "text": "x"}]}', {})
    assert blocks.content == [{"type": "text", "text": "x"}] and not blocks.is_error
    flagged = parse_reply(b'{"content": "bad input", "is_error": true}', {})
    assert flagged.is_error
    service_error = parse_reply(b"", {"Nats-Service-Error": "boom", "Nats-Service-Error-Code": "500"})
    assert service_error.is_error and service_error.content == "boom (code 500)"
    not_json = parse_reply(b"plain text", {})
    assert not_json.is_error and "not valid JSON" in str(not_json.content) and not_json.protocol_error
    not_utf8 = parse_reply(b"\xff\xfe\x00garbage", {})
    assert not_utf8.is_error and "not valid UTF-8" in str(not_utf8.protocol_error)


@pytest.mark.parametrize("content", [
    [{"type": "text", "text": "ok", "loopwire_ref": "not a reference"}],
    [{"type": "text", "text": "ok", "loopwire_ref": {"sha256": "ab", "bytes": 9}}],
    [{"type": "text", "text": "a"}, {"type": "tool_result", "tool_use_id": "x",
                                    "content": [{"type": "text", "text": "b", "Loopwire_Extra": 1}]}],
])
def test_a_reply_carrying_loopwires_own_fields_is_refused(content: Any) -> None:
    # A malformed reference block would stay in the history and break every later
    # generation of the session; a well-formed one would make loopwire read a blob the
    # provider named. Either way the model gets an error result saying why.
    refused = parse_reply(orjson.dumps({"content": content}), {})
    assert refused.is_error and refused.protocol_error
    assert isinstance(refused.content, str) and "only loopwire may set" in refused.content
    assert "content.0.loopwire_ref" in refused.content or "content.1.content.0.Loopwire_Extra" in refused.content
    assert "not a reference" not in refused.content and "sha256" not in refused.content


async def test_a_python_tool_returning_loopwires_own_fields_is_refused() -> None:
    reg = ToolRegistry()

    @reg.tool
    def bad() -> list[dict[str, Any]]:
        """Returns a reference block of its own making."""
        return [{"type": "text", "text": "x", "loopwire_ref": {}}]

    tool = reg.get("bad")
    assert tool is not None
    outcome = await call_python(tool, {})
    assert outcome.is_error and outcome.protocol_error and "content.0.loopwire_ref" in str(outcome.content)


def _info(sid: str, *endpoints: dict[str, Any], name: str = "svc") -> dict[str, Any]:
    return {"type": "io.nats.micro.v1.info_response", "id": sid, "name": name, "version": "1.0.0",
            "description": None, "metadata": {}, "endpoints": list(endpoints)}


def _endpoint(tool: str | None, schema: Any = None, subject: str = "s", **meta: str) -> dict[str, Any]:
    metadata: dict[str, Any] | None = None
    if tool is not None:
        metadata = {"loopwire.tool": tool, "description": f"the {tool} tool", **meta}
        if schema is not None:
            metadata["input_schema"] = schema if isinstance(schema, str) else orjson.dumps(schema).decode()
    return {"name": tool or "plain", "subject": subject, "queue_group": "q", "metadata": metadata}


def test_service_info_parsing() -> None:
    warnings: list[str] = []
    schema = {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}
    info = _info(
        "ID1",
        _endpoint("add", schema, subject="math.add", **{"loopwire.exclusive": "true"}),
        _endpoint(None),                                       # not a tool
        _endpoint("broken", "{not json", subject="x"),        # bad JSON
        _endpoint("wrong", {"type": 12}, subject="y"),         # not a valid schema
        _endpoint("bad name!", schema, subject="z"),
        _endpoint("bare", subject="bare"),                     # no schema: no inputs
    )
    tools = parse_service_info(info, warn=warnings.append)
    assert [t.name for t in tools] == ["add", "bare"]
    add = tools[0]
    assert (add.subject, add.service_id, add.service_name, add.exclusive) == ("math.add", "ID1", "svc", True)
    assert add.input_schema == schema and add.description == "the add tool"
    assert tools[1].input_schema == {"type": "object"} and not tools[1].exclusive
    assert len(warnings) == 3 and all("ignored" in w for w in warnings)
    assert parse_service_info({"nonsense": True}) == []


def test_provider_table_forgets_after_consecutive_misses() -> None:
    table = ProviderTable(max_misses=2)
    a = _info("A", _endpoint("add", {"type": "object"}))
    b = _info("B", _endpoint("add", {"type": "object"}))
    report = table.observe([a, b], now=1.0)
    assert sorted(report.added) == ["A", "B"]
    assert len(table.tools_by_name()["add"]) == 2       # two instances of one tool
    assert table.observe([a], now=2.0).forgotten == []  # B missed once
    assert table.observe([a, b], now=3.0).forgotten == []  # B is back: its misses reset
    table.observe([a], now=4.0)
    assert table.observe([a], now=5.0).forgotten == ["B"]
    assert [seen for _, seen in table.tools_by_name()["add"]] == [5.0]
    table.observe([], now=6.0)
    assert table.observe([], now=7.0).forgotten == ["A"]
    assert table.tools_by_name() == {}
