"""Messages and content blocks, in the Anthropic Messages format every service keeps them in
(the session history, the model's requests and replies, the events): their types, what a
message's text is, and the one way to write a tool_result block (the `tool.result` event
that reports one to clients: event_fields.tool_result_event).

A message is `{"role", "content"}`; its content a string or a list of blocks (`text`,
`tool_use`, `tool_result`, `image`, `thinking`...), as plain dicts on the hot path: the
TypedDicts below give them types without wrapping them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Required, TypeGuard

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

Role = Literal["user", "assistant"]

# How pydantic validates these inside a model (an envelope, the session state, an ingress
# body): keys they do not name kept, and no value coerced (`"is_error": 1` is refused, not
# turned into `true`), so what is read is what was sent.
_KEEP_AS_SENT = ConfigDict(extra="allow", strict=True)


@with_config(_KEEP_AS_SENT)
class CacheControl(TypedDict, total=False):
    """A prompt cache breakpoint on a block (services/llm/prompt_cache.py)."""

    type: Required[Literal["ephemeral"]]
    ttl: Literal["5m", "1h"]


@with_config(_KEEP_AS_SENT)
class BlockSource(TypedDict, total=False):
    """Where an `image` or `document` block's bytes are: `base64` (`media_type`, `data`),
    `url`, `text` (a plain-text document's `data`), `file` (`file_id`)."""

    type: Required[str]
    media_type: str
    data: str
    url: str
    file_id: str


@with_config(_KEEP_AS_SENT)
class CitationsConfig(TypedDict):
    enabled: bool


@with_config(_KEEP_AS_SENT)
class BlobRef(TypedDict):
    """Where content too large to carry is (shared/stores/blobs.py): the blob's sha256 and
    size, on the text block that stands for it until the llm service resolves it."""

    sha256: str
    bytes: int


# One TypedDict for every block type, not a union discriminated on `type`: the code reads
# blocks with `.get` and tests `type` as it goes (mypy does not narrow a union on
# `.get("type")`), and passes block types it does not read through as they came.
# `type` is not required: the router's record of a call in flight (RunTools.pending_calls)
# is only its `id` and `name` when a run was resumed from its transcript.
@with_config(_KEEP_AS_SENT)
class ContentBlock(TypedDict, total=False):
    """One block of a message's content. By type, the keys it holds:

    - `text`: `text`, `citations` (the model's, a list)
    - `tool_use`: `id`, `name`, `input` (the call's arguments, any JSON object)
    - `tool_result`: `tool_use_id`, `content` (a string or blocks), `is_error`
    - `thinking`: `thinking`, `signature`; `redacted_thinking`: `data`
    - `image`, `document`: `source`, and a document's `title`, `context`, `citations`
      (whether the model may cite it); `search_result`: `source` (its URL, a string),
      `title`, `content`, `citations`
    - any: `cache_control`; a stand-in for content in the blob store: `loopwire_ref`

    Other keys, and blocks of other types, are kept as they are.
    """

    type: str
    text: str
    citations: list[dict[str, Any]] | CitationsConfig
    id: str
    name: str
    input: dict[str, Any]
    tool_use_id: str
    content: str | list[ContentBlock]
    is_error: bool
    thinking: str
    signature: str
    data: str
    source: BlockSource | str
    title: str
    context: str
    cache_control: CacheControl
    loopwire_ref: BlobRef


Content = str | list[ContentBlock]
"""A message's content, or a tool_result's: a string, or a list of blocks."""


@with_config(_KEEP_AS_SENT)
class Message(TypedDict):
    """One message of a conversation, as the Messages API takes and returns it."""

    role: Role
    content: Content


class ToolParam(TypedDict, total=False):
    """A tool offered in a Messages API request."""

    name: Required[str]
    description: str
    input_schema: Required[dict[str, Any]]
    cache_control: CacheControl


class MessagesRequest(TypedDict, total=False):
    """The body of a Messages API request (`/v1/messages`, its `count_tokens`), as the SDK
    sends it: what the fake Messages API reads (loopwire.testing.fake_anthropic)."""

    model: Required[str]
    messages: Required[list[Message]]
    max_tokens: int
    system: str | list[ContentBlock]
    tools: list[ToolParam]
    stream: bool
    temperature: float


def is_block(value: object) -> TypeGuard[ContentBlock]:
    """Whether a value read from JSON (an agent's output, a stored list) is taken for a
    block: any object is, as the services pass blocks of types they do not read through."""
    return isinstance(value, dict)


def is_text(block: object) -> TypeGuard[ContentBlock]:
    """Whether `block` is a text block."""
    return isinstance(block, dict) and block.get("type") == "text"


def text_of(content: Any, sep: str = "") -> str:
    """The text of a message's content: a string is its own text; of a list of blocks, the
    text of its text blocks joined by `sep` (tool calls, tool results, images left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return sep.join(str(b.get("text") or "") for b in content if is_text(b))
    return ""


def message_text(message: Message | Mapping[str, Any] | None) -> str:
    """The text of a message (`text_of` its content); "" for none."""
    return text_of(message.get("content")) if message else ""


def blocks_of(content: Content | None) -> list[ContentBlock]:
    """The blocks of a message's content, to look for calls and results in: a string (or
    no content) holds none."""
    return content if isinstance(content, list) else []


def as_blocks(content: Content) -> list[ContentBlock]:
    """A message's content as a list of blocks: a string is one text block."""
    return [text_block(content)] if isinstance(content, str) else content


def tool_uses(message: Message | None) -> list[ContentBlock]:
    """The tool_use blocks of a message, in its order."""
    return [b for b in blocks_of(message.get("content")) if b.get("type") == "tool_use"] if message else []


def text_block(text: str) -> ContentBlock:
    return {"type": "text", "text": text}


def tool_result_block(tool_use_id: str, content: Content, *, is_error: bool = False) -> ContentBlock:
    """The answer to the tool_use `tool_use_id` in the next user message; `is_error` is
    written only when set, as the Messages API takes it."""
    block: ContentBlock = {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def is_tool_result(block: object) -> TypeGuard[ContentBlock]:
    """Whether `block` is a tool_result block (with the id of the call it answers)."""
    return isinstance(block, dict) and block.get("type") == "tool_result" and "tool_use_id" in block
