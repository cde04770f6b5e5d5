"""The OpenAI wire formats the fake OpenAI API (fake_openai.py) answers in: a scripted
answer as a Responses API `response` and its SSE events, or as a Chat Completions
`chat.completion` and its `chat.completion.chunk`s, and the APIs' error body."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NotRequired

from typing_extensions import TypedDict

from .fake_anthropic import json_chunks

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
               429: "rate_limit_error", 500: "server_error", 503: "server_error"}


class FunctionCall(TypedDict):
    """A function call of an answer: its item id, the call id the agent answers it by, and
    its arguments as a JSON string."""

    id: str
    call_id: str
    name: str
    namespace: str | None
    arguments: str


class ResponsesUsage(TypedDict):
    input_tokens: int
    input_tokens_details: dict[str, int]
    output_tokens: int
    output_tokens_details: dict[str, int]
    total_tokens: int


class ResponseItem(TypedDict, total=False):
    """An output item of a response: a `message` (its `content`, `role`) or a `function_call`."""

    id: str
    type: str
    status: str
    role: str
    content: list[dict[str, object]]
    call_id: str
    name: str
    arguments: str
    namespace: str


class ResponseObject(TypedDict):
    id: str
    object: str
    created_at: int
    status: str
    model: str
    output: list[ResponseItem]
    usage: ResponsesUsage | None
    error: None
    incomplete_details: None
    parallel_tool_calls: bool
    tool_choice: str


class ResponseEvent(TypedDict, total=False):
    """One SSE event of a streamed response: its `type`, `sequence_number`, and what it carries."""

    type: str
    sequence_number: int
    response: ResponseObject
    output_index: int
    content_index: int
    item_id: str
    item: ResponseItem
    part: dict[str, object]
    delta: str
    text: str
    arguments: str
    logprobs: list[object]


class ChatUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: dict[str, int]
    completion_tokens_details: dict[str, int]


class ChatDelta(TypedDict, total=False):
    role: str
    content: str | None
    tool_calls: list[dict[str, object]]


class ChatChoice(TypedDict):
    index: int
    logprobs: None
    finish_reason: str | None
    message: NotRequired[ChatDelta]
    delta: NotRequired[ChatDelta]


class ChatCompletion(TypedDict):
    """A `chat.completion`, or one `chat.completion.chunk` of a stream (`usage` on the last
    only, when the request asked for it)."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ChatChoice]
    usage: NotRequired[ChatUsage]


class OpenAIError(TypedDict):
    error: dict[str, str | None]


@dataclass
class Answer:
    """A response spec made concrete: text, function calls with ids, usage."""
    id: str
    model: str
    text: str
    chunks: list[str]
    calls: list[FunctionCall]
    """`{"id", "call_id", "name", "namespace", "arguments"}`, arguments as a JSON string."""
    usage: dict[str, int]
    chunk_delay_s: float = 0.0


# -- the Responses API --------------------------------------------------------------------
def responses_usage(usage: dict[str, int]) -> ResponsesUsage:
    return {"input_tokens": usage["input_tokens"],
            "input_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
            "output_tokens": usage["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning_tokens", 0)},
            "total_tokens": usage["input_tokens"] + usage["output_tokens"]}

def response_items(answer: Answer) -> list[ResponseItem]:
    items: list[ResponseItem] = []
    if answer.text:
        items.append({"id": f"msg_{answer.id}", "type": "message", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": answer.text, "annotations": []}]})
    for call in answer.calls:
        item = ResponseItem(id=call["id"], type="function_call", status="completed", call_id=call["call_id"],
                            name=call["name"], arguments=call["arguments"])
        if call["namespace"]:
            item["namespace"] = call["namespace"]
        items.append(item)
    return items

def response_object(answer: Answer, status: str = "completed") -> ResponseObject:
    done = status == "completed"
    return {"id": answer.id, "object": "response", "created_at": int(time.time()), "status": status,
            "model": answer.model, "output": response_items(answer) if done else [],
            "usage": responses_usage(answer.usage) if done else None,
            "error": None, "incomplete_details": None, "parallel_tool_calls": True, "tool_choice": "auto"}

def responses_events(answer: Answer) -> Iterator[ResponseEvent]:
    """The SSE events of a streamed response (each has its `type`), in the API's order."""
    seq = iter(range(1_000_000))
    yield {"type": "response.created", "sequence_number": next(seq),
           "response": response_object(answer, "in_progress")}
    yield {"type": "response.in_progress", "sequence_number": next(seq),
           "response": response_object(answer, "in_progress")}
    for index, item in enumerate(response_items(answer)):
        if item["type"] == "message":
            yield {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": index,
                   "item": {**item, "status": "in_progress", "content": []}}
            part: dict[str, object] = {"type": "output_text", "text": "", "annotations": []}
            yield {"type": "response.content_part.added", "sequence_number": next(seq), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "part": part}
            for piece in answer.chunks:
                yield {"type": "response.output_text.delta", "sequence_number": next(seq),
                       "item_id": item["id"], "output_index": index, "content_index": 0, "delta": piece,
                       "logprobs": []}
            yield {"type": "response.output_text.done", "sequence_number": next(seq), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "text": answer.text, "logprobs": []}
            yield {"type": "response.content_part.done", "sequence_number": next(seq), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "part": {**part, "text": answer.text}}
        else:
            yield {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": index,
                   "item": {**item, "status": "in_progress", "arguments": ""}}
            for piece in json_chunks(item["arguments"]):
                yield {"type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                       "item_id": item["id"], "output_index": index, "delta": piece}
            yield {"type": "response.function_call_arguments.done", "sequence_number": next(seq),
                   "item_id": item["id"], "output_index": index, "arguments": item["arguments"]}
        yield {"type": "response.output_item.done", "sequence_number": next(seq), "output_index": index,
               "item": item}
    yield {"type": "response.completed", "sequence_number": next(seq), "response": response_object(answer)}

# -- Chat Completions ----------------------------------------------------------------------
def chat_usage(usage: dict[str, int]) -> ChatUsage:
    return {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
            "completion_tokens_details": {"reasoning_tokens": usage.get("reasoning_tokens", 0)}}

def chat_completion(answer: Answer) -> ChatCompletion:
    message: ChatDelta = {"role": "assistant", "content": answer.text or None}
    if answer.calls:
        message["tool_calls"] = [{"id": c["call_id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in answer.calls]
    return {"id": f"chatcmpl_{answer.id}", "object": "chat.completion", "created": int(time.time()),
            "model": answer.model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                                "finish_reason": "tool_calls" if answer.calls else "stop"}],
            "usage": chat_usage(answer.usage)}

def chat_chunks(answer: Answer, include_usage: bool) -> Iterator[ChatCompletion]:
    """The `chat.completion.chunk`s of a streamed completion, in the API's order."""
    created = int(time.time())

    def chunk(delta: ChatDelta, finish: str | None = None) -> ChatCompletion:
        return {"id": f"chatcmpl_{answer.id}", "object": "chat.completion.chunk", "created": created,
                "model": answer.model, "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                    "finish_reason": finish}]}

    yield chunk({"role": "assistant", "content": ""})
    for piece in answer.chunks if answer.text else []:
        yield chunk({"content": piece})
    for i, call in enumerate(answer.calls):
        yield chunk({"tool_calls": [{"index": i, "id": call["call_id"], "type": "function",
                                     "function": {"name": call["name"], "arguments": ""}}]})
        for piece in json_chunks(call["arguments"]):
            yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    yield chunk({}, "tool_calls" if answer.calls else "stop")
    if include_usage:
        yield {"id": f"chatcmpl_{answer.id}", "object": "chat.completion.chunk", "created": created,
               "model": answer.model, "choices": [], "usage": chat_usage(answer.usage)}

def error_body(status: int, message: str | None = None, error_type: str | None = None,
               *, code: str | None = None) -> OpenAIError:
    return {"error": {"message": message or f"error {status}", "type": error_type or ERROR_TYPES.get(
        status, "server_error"), "param": None, "code": code}}
