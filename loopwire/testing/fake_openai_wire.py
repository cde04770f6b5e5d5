"""The OpenAI wire formats the fake OpenAI API (fake_openai.py) answers in: a scripted
answer as a Responses API `response` and its SSE events, or as a Chat Completions
`chat.completion` and its `chat.completion.chunk`s, and the APIs' error body."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .fake_anthropic import json_chunks

ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 404: "invalid_request_error",
               429: "rate_limit_error", 500: "server_error", 503: "server_error"}


@dataclass
class Answer:
    """A response spec made concrete: text, function calls with ids, usage."""
    id: str
    model: str
    text: str
    chunks: list[str]
    calls: list[dict[str, Any]]
    """`{"id", "call_id", "name", "namespace", "arguments"}`, arguments as a JSON string."""
    usage: dict[str, int]
    chunk_delay_s: float = 0.0


# -- the Responses API --------------------------------------------------------------------
def responses_usage(usage: dict[str, int]) -> dict[str, Any]:
    return {"input_tokens": usage["input_tokens"],
            "input_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
            "output_tokens": usage["output_tokens"],
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning_tokens", 0)},
            "total_tokens": usage["input_tokens"] + usage["output_tokens"]}

def response_items(answer: Answer) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if answer.text:
        items.append({"id": f"msg_{answer.id}", "type": "message", "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": answer.text, "annotations": []}]})
    for call in answer.calls:
        item = {"id": call["id"], "type": "function_call", "status": "completed",
                "call_id": call["call_id"], "name": call["name"], "arguments": call["arguments"]}
        if call.get("namespace"):
            item["namespace"] = call["namespace"]
        items.append(item)
    return items

def response_object(answer: Answer, status: str = "completed") -> dict[str, Any]:
    done = status == "completed"
    return {"id": answer.id, "object": "response", "created_at": int(time.time()), "status": status,
            "model": answer.model, "output": response_items(answer) if done else [],
            "usage": responses_usage(answer.usage) if done else None,
            "error": None, "incomplete_details": None, "parallel_tool_calls": True, "tool_choice": "auto"}

def responses_events(answer: Answer) -> Iterator[dict[str, Any]]:
    """The SSE events of a streamed response (each has its `type`), in the API's order."""
    seq = iter(range(1_000_000))
    yield {"type": "response.created", "sequence_number": next(seq),
           "response": response_object(answer, "in_progress")}
    yield {"type": "response.in_progress", "sequence_number": next(seq),
           "response": response_object(answer, "in_progress")}
    for index, item in enumerate(response_items(answer)):
        if item["type"] == "message":
            yield {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": index,
                   "item": dict(item, status="in_progress", content=[])}
            part = {"type": "output_text", "text": "", "annotations": []}
            yield {"type": "response.content_part.added", "sequence_number": next(seq), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "part": part}
            for piece in answer.chunks:
                yield {"type": "response.output_text.delta", "sequence_number": next(seq),
                       "item_id": item["id"], "output_index": index, "content_index": 0, "delta": piece,
                       "logprobs": []}
            yield {"type": "response.output_text.done", "sequence_number": next(seq), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "text": answer.text, "logprobs": []}
            yield {"type": "response.content_part.done", "sequence_number": next(seq), "item_id": item["id"],
                   "output_index": index, "content_index": 0, "part": dict(part, text=answer.text)}
        else:
            yield {"type": "response.output_item.added", "sequence_number": next(seq), "output_index": index,
                   "item": dict(item, status="in_progress", arguments="")}
            for piece in json_chunks(item["arguments"]):
                yield {"type": "response.function_call_arguments.delta", "sequence_number": next(seq),
                       "item_id": item["id"], "output_index": index, "delta": piece}
            yield {"type": "response.function_call_arguments.done", "sequence_number": next(seq),
                   "item_id": item["id"], "output_index": index, "arguments": item["arguments"]}
        yield {"type": "response.output_item.done", "sequence_number": next(seq), "output_index": index,
               "item": item}
    yield {"type": "response.completed", "sequence_number": next(seq), "response": response_object(answer)}

# -- Chat Completions ----------------------------------------------------------------------
def chat_usage(usage: dict[str, int]) -> dict[str, Any]:
    return {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
            "total_tokens": usage["input_tokens"] + usage["output_tokens"],
            "prompt_tokens_details": {"cached_tokens": usage.get("cached_tokens", 0)},
            "completion_tokens_details": {"reasoning_tokens": usage.get("reasoning_tokens", 0)}}

def chat_completion(answer: Answer) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.calls:
        message["tool_calls"] = [{"id": c["call_id"], "type": "function",
                                  "function": {"name": c["name"], "arguments": c["arguments"]}}
                                 for c in answer.calls]
    return {"id": f"chatcmpl_{answer.id}", "object": "chat.completion", "created": int(time.time()),
            "model": answer.model, "choices": [{"index": 0, "message": message, "logprobs": None,
                                                "finish_reason": "tool_calls" if answer.calls else "stop"}],
            "usage": chat_usage(answer.usage)}

def chat_chunks(answer: Answer, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The `chat.completion.chunk`s of a streamed completion, in the API's order."""
    head = {"id": f"chatcmpl_{answer.id}", "object": "chat.completion.chunk", "created": int(time.time()),
            "model": answer.model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return dict(head, choices=[{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}])

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
        yield dict(head, choices=[], usage=chat_usage(answer.usage))

def error_body(status: int, message: str | None = None, error_type: str | None = None,
               *, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message or f"error {status}", "type": error_type or ERROR_TYPES.get(
        status, "server_error"), "param": None, "code": code}}
