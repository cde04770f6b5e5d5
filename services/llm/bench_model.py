"""The model of `make bench`: as little work as possible, so a benchmark measures loopwire.

`BenchModel` calls a `noop` tool N times (N from `bench:N` in the first user message),
then answers "done". `DemoModel` (demo_model.py) hands a request to it when `noop` is
offered and the first user message says `bench:N`, so `LOOPWIRE_LLM_PROVIDER=scripted`
selects it.
"""

from __future__ import annotations

import hashlib
import re

import orjson

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock, Message, text_of

from .model import Model
from .model_call import ModelRequest, ModelResponse
from .model_events import Finished, ModelStream
from .offline_reply import stream_text

BENCH_TOOL = "noop"
_BENCH_PROMPT = re.compile(r"\bbench:(\d+)\b")


def bench_target(request: ModelRequest) -> int | None:
    """N when `request` is a bench run: the `noop` tool is offered and the first user
    message says `bench:N`; None otherwise."""
    if BENCH_TOOL not in request.tool_names():
        return None
    first = next((m for m in request.messages if m.get("role") == "user"), None)
    if first is None:
        return None
    match = _BENCH_PROMPT.search(text_of(first.get("content", "")))
    return int(match.group(1)) if match else None


def count_tool_results(messages: list[Message]) -> int:
    """tool_result blocks in the conversation (one per finished tool call)."""
    count = 0
    for message in messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, list):
            count += sum(1 for b in content if isinstance(b, dict) and b.get("type") == "tool_result")
    return count


def calls_done(messages: list[Message]) -> int:
    """`count_tool_results` of a bench conversation, read from its end: each `noop` call's
    input `n` is one more than the results before it, so the results are the latest call's
    `n` once a result follows it (`n` - 1 before). Its first turn, with no call yet, counts.
    The walk of the whole history would grow with every turn of the run it measures."""
    answered = False
    for message in reversed(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        if message.get("role") == "assistant":
            for block in reversed(content):
                if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == BENCH_TOOL:
                    n = (block.get("input") or {}).get("n")
                    if type(n) is int:
                        return n if answered else n - 1
        elif any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
            answered = True
    return count_tool_results(messages)


class BenchModel(Model):
    """`make bench`'s model: calls `noop` until the conversation holds N tool results (N
    from `bench:N` in the first user message), then answers "done". Each call's input is
    `{"n": <call number>}`, 1 to N: the same input in consecutive turns is what the
    router's loop detection (rightly) stops.

    No delay and as little work as possible, so a benchmark measures loopwire and not
    the model: the tool_use id hashes only the last message and the conversation's length
    (deterministic, and distinct across the turns of a run and the runs of a session),
    and usage is a constant per call instead of a word count of the whole history."""

    name = "bench"
    model_id = "loopwire-bench"

    async def stream(self, request: ModelRequest) -> ModelStream:
        target = bench_target(request) or 0
        done = calls_done(request.messages)
        last: Message | None = request.messages[-1] if request.messages else None
        if done < target:
            digest = hashlib.sha1(orjson.dumps(last if last is not None else {}, option=orjson.OPT_SORT_KEYS)
                                  + f":{len(request.messages)}:{done}".encode())
            blocks: list[ContentBlock] = [{"type": "tool_use", "id": f"toolu_{digest.hexdigest()[:20]}",
                                             "name": BENCH_TOOL, "input": {"n": done + 1}}]
            stop = "tool_use"
        else:
            async for delta in stream_text("done"):
                yield delta
            blocks = [{"type": "text", "text": "done"}]
            stop = "end_turn"
        yield Finished(ModelResponse(message={"role": "assistant", "content": blocks}, stop_reason=stop,
                                     model=self.model_id, usage=Usage(input_tokens=10, output_tokens=5),
                                     response_id=f"msg_bench_{done}"))
