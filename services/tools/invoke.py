"""Calling one tool: an in-process function or a NATS provider, and shaping what comes back
(an MCP server's tool is called by its connection, mcp_client.py, into the same Outcome).

Both paths return an :class:`Outcome` (content + is_error) or raise; the executor turns a
raise into an error result and owns timeouts, validation and recording.

The provider protocol (docs/protocol.md, "Tool providers"): the tool input is the request
body; headers `Loopwire-Session-Id` and `Loopwire-Tool-Use-Id` go with it, and the run's
context fields when it has them (`Loopwire-User-Id`, `Loopwire-Workspace-Id`); the reply is
``{"content": str or [content blocks], "is_error": bool}``, and a NATS service error
reply (headers `Nats-Service-Error`, `Nats-Service-Error-Code`) counts as an error result.
A reply whose content carries loopwire's own fields (keys starting with `loopwire`, such as
`loopwire_ref`, the reference to a stored large content: shared/stores/blobs.py) is refused: it
would be taken for loopwire's own, stay in the session's history, and break every later
generation of it (as the ingress refuses them from clients).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import nats.errors
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from pydantic import BaseModel

from loopwire.shared.contract.input_guard import internal_field_paths
from loopwire.shared.contract.messages import Content

from .registry import CallContext, PythonTool

log = logging.getLogger("loopwire.tools.invoke")

SESSION_HEADER = "Loopwire-Session-Id"
TOOL_USE_HEADER = "Loopwire-Tool-Use-Id"
USER_HEADER = "Loopwire-User-Id"
WORKSPACE_HEADER = "Loopwire-Workspace-Id"
SERVICE_ERROR_HEADER = "Nats-Service-Error"
SERVICE_ERROR_CODE_HEADER = "Nats-Service-Error-Code"
STATUS_HEADER = "Status"
NO_RESPONDERS_STATUS = "503"
"""What nats-server sends to a request's reply subject when nothing subscribes to it."""
RECONNECT_CHECK_S = 0.5
"""How often a call waiting for its reply checks whether the client reconnected (and,
once its attempt's time is up, whether its provider is still there)."""

@dataclass(frozen=True)
class Outcome:
    content: Content
    is_error: bool = False
    protocol_error: str | None = None
    """Set when the provider broke the reply contract (a body that is not UTF-8 JSON):
    the model gets an error result and the session an `error` event."""


class ProviderUnavailable(Exception):
    """No provider answered the tool's subject (NATS no-responders)."""


def is_content_blocks(value: Any) -> bool:
    """A non-empty list of dicts that each carry a `type` (Anthropic content blocks)."""
    return (isinstance(value, list) and bool(value)
            and all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in value))


def to_content(value: Any) -> Content:
    """Whatever a tool returned, as tool_result content: strings and content blocks pass
    through, None is empty, anything else is JSON-encoded to text."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if is_content_blocks(value):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return str(value)


def context_headers(user_id: str | None, workspace_id: str | None) -> dict[str, str]:
    """The run's context fields a provider gets as headers (those the run has)."""
    pairs = ((USER_HEADER, user_id), (WORKSPACE_HEADER, workspace_id))
    return {name: value for name, value in pairs if value}


async def call_python(tool: PythonTool, arguments: dict[str, Any], *, session_id: str = "",
                      tool_use_id: str = "", user_id: str | None = None, workspace_id: str | None = None) -> Outcome:
    result = await tool.call(arguments, CallContext(session_id, tool_use_id, user_id=user_id,
                                                    workspace_id=workspace_id))
    return refused_if_internal(Outcome(to_content(result)))


async def call_provider(nc: NatsClient, subject: str, arguments: dict[str, Any], *, session_id: str,
                        tool_use_id: str, timeout_s: float, attempt_timeout_s: float | None = None,
                        context: dict[str, str] | None = None,
                        instances: Callable[[], frozenset[str]] | None = None) -> Outcome:
    """One call to a provider endpoint, within `timeout_s`. Raises TimeoutError (nats' own
    subclasses it) and ProviderUnavailable.

    A provider that stays connected gets the request once, however long it waits in the
    provider's queue (a `nats.micro` endpoint in Python serves one request at a time): a
    busy provider is not a lost request. The request is sent again, with the same
    Loopwire-Tool-Use-Id (the provider's idempotency key) and to the same reply inbox, only
    when it may have been lost:

    - this client reconnected since it was sent (a reply sent meanwhile went nowhere);
    - no reply came within `attempt_timeout_s` and a provider instance that could have taken
      it is gone: `instances()` (the ids of the instances serving `subject`, from discovery,
      which forgets an instance that stops answering `$SRV.INFO`) no longer holds one it held
      when the request was sent, or held none then.

    Without `instances` every unanswered attempt counts as lost. The first reply to any
    attempt answers the call. `context`: more headers
    (`context_headers`)."""
    headers = {SESSION_HEADER: session_id, TOOL_USE_HEADER: tool_use_id, **(context or {})}
    payload = orjson.dumps(arguments)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    per_attempt = attempt_timeout_s if attempt_timeout_s and attempt_timeout_s > 0 else timeout_s
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        attempt = 0
        while True:
            attempt += 1
            reconnects = nc.stats["reconnects"]
            sent_to = instances() if instances is not None else frozenset()
            await nc.publish(subject, payload, reply=inbox, headers=headers)
            why = await _wait_for_reply(sub, nc, _Attempt(reconnects=reconnects, deadline=deadline, per_attempt=per_attempt,
                                                          sent_to=sent_to, instances=instances))
            if isinstance(why, Msg):
                if (why.headers or {}).get(STATUS_HEADER) == NO_RESPONDERS_STATUS:
                    raise ProviderUnavailable(f"no provider answers on {subject}")
                return parse_reply(why.data, why.headers or {})
            if why is None:
                raise TimeoutError(f"no reply from {subject} in {timeout_s:g}s ({attempt} attempts)")
            log.info("tool call %s on %s: no reply to attempt %d (%s); sending it again", tool_use_id, subject,
                     attempt, why)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


@dataclass(frozen=True)
class _Attempt:
    reconnects: int
    """The client's reconnect count when the request was sent."""
    deadline: float
    """The call's end (the loop's clock)."""
    per_attempt: float
    sent_to: frozenset[str]
    """The provider instances that could have taken the request when it was sent."""
    instances: Callable[[], frozenset[str]] | None


async def _wait_for_reply(sub: Any, nc: NatsClient, attempt: _Attempt) -> Msg | str | None:
    """The reply (or the no-responders status) to the attempt; else why to send it again
    (`reconnected`, `provider gone`, ...), or None when the call's time is up."""
    loop = asyncio.get_running_loop()
    attempt_end = min(attempt.deadline, loop.time() + attempt.per_attempt)
    while (left := attempt.deadline - loop.time()) > 0:
        try:
            return await sub.next_msg(timeout=min(left, RECONNECT_CHECK_S))
        except nats.errors.TimeoutError:
            if nc.stats["reconnects"] != attempt.reconnects:
                return "reconnected"
            if loop.time() < attempt_end:
                continue
            if attempt.instances is None:
                return "attempt timed out"
            if not attempt.sent_to:
                return "no provider instance was known when it was sent"
            if attempt.sent_to - attempt.instances():
                return "provider gone"
            continue  # every instance that could have it is still there: busy, not lost
    return None


def parse_reply(data: bytes, headers: dict[str, str]) -> Outcome:
    """Map a provider's reply to an outcome."""
    if SERVICE_ERROR_HEADER in headers or SERVICE_ERROR_CODE_HEADER in headers:
        message = headers.get(SERVICE_ERROR_HEADER) or "provider error"
        code = headers.get(SERVICE_ERROR_CODE_HEADER)
        return Outcome(f"{message} (code {code})" if code else message, is_error=True)
    try:
        body = orjson.loads(data) if data else {}
    except orjson.JSONDecodeError as exc:
        try:
            data.decode("utf-8")
            problem = f"the provider's reply is not valid JSON ({exc})"
        except UnicodeDecodeError as bad:
            problem = f"the provider's reply is not valid UTF-8 (byte {bad.start})"
        log.warning("bad tool reply: %s", problem)
        return Outcome(f"tool failed: {problem}", is_error=True, protocol_error=problem)
    if not isinstance(body, dict) or "content" not in body:
        log.warning("provider reply has no `content`; passing the whole body on as text")
        return Outcome(to_content(body))
    content = body["content"]
    if content is None or content == []:
        content = ""
    content = content if isinstance(content, str) or is_content_blocks(content) else to_content(content)
    return refused_if_internal(Outcome(content, is_error=bool(body.get("is_error", False))))


def refused_if_internal(outcome: Outcome) -> Outcome:
    """`outcome`, or an error result naming where its content carries a field only
    loopwire sets: the model reads why the tool's answer was dropped, the session gets
    an `error` event (`bad_tool_reply`), and nothing of it reaches the history."""
    if isinstance(outcome.content, str):
        return outcome
    paths = internal_field_paths(outcome.content, "content")
    if not paths:
        return outcome
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    problem = f"the tool's reply carries fields only loopwire may set ({shown}); its content was dropped"
    log.warning("bad tool reply: %s", problem)
    return Outcome(f"tool failed: {problem}", is_error=True, protocol_error=problem)
