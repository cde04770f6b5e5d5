"""The prompt cache's breakpoints on a request (services/llm/prompt_cache.py) and the fake
Messages API's cache that reads them (loopwire/testing/fake_prompt_cache.py)."""

from __future__ import annotations

from typing import Any

import pytest

from loopwire.llm.anthropic_model import request_params
from loopwire.llm.model_call import ModelRequest
from loopwire.shared.contract.envelopes import ToolSpec
from loopwire.testing.fake_prompt_cache import PromptCache

pytestmark = pytest.mark.unit

TOOLS = [ToolSpec(name=n, description=f"the {n} tool", input_schema={"type": "object"}) for n in ("zeta", "add")]


def request(messages: list[dict[str, Any]], notes: list[str], cache: bool = True) -> ModelRequest:
    system = "You are careful. " * 50
    notes_text = "\n".join(f"<system-reminder>{n}</system-reminder>" for n in notes)
    return ModelRequest(model="m", messages=messages, max_tokens=100, system=f"{system}\n\n{notes_text}",
                        tools=TOOLS, prompt_cache=cache, stable_system=system, notes=notes)


def marks(params: dict[str, Any]) -> int:
    blocks = [*params.get("tools", []), *(params["system"] if isinstance(params.get("system"), list) else [])]
    blocks += [b for m in params["messages"] if isinstance(m["content"], list) for b in m["content"]]
    return sum("cache_control" in b for b in blocks)


def test_breakpoints_after_the_tools_the_stable_system_and_the_conversation_notes_after_them() -> None:
    messages = [{"role": "user", "content": "add 1 and 2"}]
    params = request_params(request(messages, ["Progress: 1 call"]))
    assert [t["name"] for t in params["tools"]] == ["zeta", "add"], "memory's order, which is canonical"
    assert "cache_control" in params["tools"][-1] and "cache_control" not in params["tools"][0]
    (system,) = params["system"]
    assert system["cache_control"] == {"type": "ephemeral"} and "Progress" not in system["text"]
    last = params["messages"][-1]["content"]
    assert last[0] == {"type": "text", "text": "add 1 and 2", "cache_control": {"type": "ephemeral"}}
    assert last[1] == {"type": "text", "text": "<system-reminder>Progress: 1 call</system-reminder>"}
    assert marks(params) == 3
    assert messages == [{"role": "user", "content": "add 1 and 2"}], "the request's own messages are left as they were"
    off = request_params(request(messages, ["Progress: 1 call"], cache=False))
    assert marks(off) == 0 and "Progress" in off["system"]


def test_the_next_turn_reads_the_previous_prefix_from_the_fakes_cache() -> None:
    cache = PromptCache(clock=lambda: 0.0)
    turn1 = [{"role": "user", "content": "add 1 and 2"}]
    first = cache.usage("m", request_params(request(turn1, ["note one"])))
    assert first is not None and first["cache_read_input_tokens"] == 0 and first["cache_creation_input_tokens"] > 0
    turn2 = [*turn1, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "add", "input": {}}]},
             {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "3"}]}]
    second = cache.usage("m", request_params(request(turn2, ["note two: different"])))
    assert second is not None
    assert second["cache_read_input_tokens"] == first["cache_creation_input_tokens"], "all of turn 1's prefix"
    assert 0 < second["cache_creation_input_tokens"] < second["cache_read_input_tokens"]
    later = PromptCache(clock=lambda: 0.0)
    assert later.usage("m", request_params(request(turn2, ["x"], cache=False))) is None, "no breakpoint, no cache"
    expired = PromptCache(clock=iter([0.0, 301.0]).__next__)
    expired.usage("m", request_params(request(turn1, [])))
    assert expired.usage("m", request_params(request(turn2, [])))["cache_read_input_tokens"] == 0  # type: ignore[index]


def test_a_run_that_may_wait_on_a_person_marks_every_breakpoint_with_the_hour_ttl() -> None:
    import dataclasses

    hour = dataclasses.replace(request([{"role": "user", "content": "hi"}], ["note"]), cache_ttl="1h")
    params = request_params(hour)
    blocks = [*params["tools"], *params["system"], *params["messages"][-1]["content"]]
    controls = [b["cache_control"] for b in blocks if "cache_control" in b]
    assert controls and all(c == {"type": "ephemeral", "ttl": "1h"} for c in controls)
    plain = request_params(request([{"role": "user", "content": "hi"}], ["note"]))
    blocks = [*plain["tools"], *plain["system"], *plain["messages"][-1]["content"]]
    assert all(b["cache_control"] == {"type": "ephemeral"} for b in blocks if "cache_control" in b)
