"""Executing the tool calls of one assistant message (an ExecuteTools envelope).

For each call, in this order of checks: a recorded result is replayed (never executed
twice); a denied call, an unknown tool or an input that fails the tool's JSON Schema
gets an error result without reaching the tool; otherwise the tool runs under its
timeout. Every outcome, failures included, becomes a result the model can read:
nothing a tool does crashes the service.

Calls run concurrently, in the order their tools' execution hints and dependencies ask
for (staging.py: `sequential` calls one after another, an `exclusive` call alone, a call
after the calls it depends on; a turn whose dependencies form a cycle or name what
does not exist is refused whole, with an error result per call). Each result is
recorded under `keys.tool_call_step` the moment it exists, then handed to
`on_result` (the service reports it to the router, which emits its `tool.result`); the
list returned is in the model's order, and handed to `then` (the service sends it to the
router as the batch's result).

A single call's result goes to `then` while its record is written, not after, when the
batch's claim is fresh (taken less than a third of its TTL ago, before any renewal was
due): no other worker can hold the claim then, so the record cannot be refused, and the
hop saves its round trip. A record that fails anyway (Redis away) fails the delivery as
before: it is redelivered, finds no record and runs the call again, as it would had the
process stopped between the call and its record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import best_match, relevance
from nats.aio.client import Client as NatsClient

from loopwire.shared.contract import keys
from loopwire.shared.contract.envelopes import ExecuteTools, ToolCall, ToolResultItem
from loopwire.shared.observability import metrics, tracing
from loopwire.shared.runtime.inflight import CancelSignal, StepCancelled, unless_cancelled
from loopwire.shared.stores.blobs import BlobStore, externalize
from loopwire.shared.stores.step_store import StepStore, renewed

from .catalog import Catalog, ResolvedTool
from .invoke import Outcome, ProviderUnavailable, call_provider, call_python, context_headers
from .mcp_tool import McpTool, McpUnavailable
from .recording import Recordings
from .registry import PythonTool, ToolError
from .retry import TransientToolError, with_retries
from .staging import Hint, Staging, hint_of, stage

log = logging.getLogger("loopwire.tools.executor")

ResultCallback = Callable[[ToolResultItem], Awaitable[None]]
ResultsCallback = Callable[[list[ToolResultItem]], Awaitable[None]]


@dataclass
class _BatchClaim:
    """This worker's claim of a batch, and what is left of it."""

    key: str
    token: str
    unrecorded: int
    """Calls of the batch with no record yet."""
    fresh_until: float
    """Until when (the monotonic clock) the claim is certainly this worker's: a third of its
    TTL after the claim was asked for, when its first renewal is due."""
    released: bool = False
    """The claim was dropped by the script of the batch's last record."""


def _outcome(item: ToolResultItem, recorded: bool, known: bool) -> str:
    """The `outcome` label of loopwire_tool_calls_total: ok, error, unknown, cancelled."""
    if not recorded:
        return "cancelled"
    if not item.is_error:
        return "ok"
    return "error" if known else "unknown"


class Executor:
    def __init__(self, catalog: Catalog, steps: StepStore, nc: NatsClient | None,
                 *, default_timeout_s: float, attempt_timeout_s: float | None = None, claim_ttl_s: float = 30.0,
                 refresh: Callable[[], Awaitable[Any]] | None = None,
                 blobs: BlobStore | None = None, large_content_bytes: int = 64 * 1024,
                 on_protocol_error: Callable[[ExecuteTools, ToolCall, str], Awaitable[Any]] | None = None,
                 recordings: Recordings | None = None) -> None:
        self.catalog = catalog
        self.recordings = recordings
        """Answers the calls of a step with a recording (a replay's fork): recording.py."""
        self.on_protocol_error = on_protocol_error
        """Told when a provider's reply breaks the contract (the service emits `error`)."""
        self.blobs = blobs
        self.large_content_bytes = large_content_bytes
        """Results above this size are stored once and travel as a reference block."""
        self.steps = steps
        self.nc = nc
        self.default_timeout_s = default_timeout_s
        self.attempt_timeout_s = attempt_timeout_s
        """A provider request unanswered this long whose provider is gone is sent again
        (invoke.call_provider)."""
        self.claim_ttl_s = claim_ttl_s
        """How long a batch's claim outlives a worker that stopped renewing it (AckWait)."""
        self.refresh = refresh
        """Runs one discovery round; used once per envelope when a tool is unknown, so a
        provider that started a moment ago is found before its call fails."""

    async def execute(self, env: ExecuteTools, on_result: ResultCallback | None = None,
                      cancel: CancelSignal | None = None, *, then: ResultsCallback | None = None) -> list[ToolResultItem]:
        """The batch's results, in the model's order, once recorded and handed to `then`
        (when given)."""
        calls = env.calls
        # Every delivery, first or not, claims the batch before any call runs, in the script
        # that reads the calls' records (shared/stores/step_store.py): one in a paused process's
        # buffer may be work another replica did meanwhile. StepHeld while another live
        # worker runs it.
        claim_key = keys.tool_batch_step(env.session_id, env.step_id)
        asked = time.monotonic()
        claim = await self.steps.claim(claim_key, [keys.tool_call_step(env.session_id, c.tool_use_id) for c in calls],
                                       self.claim_ttl_s)
        recorded = claim.records
        if claim.token is None:  # all recorded: reported again (events dedup), nothing runs
            items = [ToolResultItem.model_validate(r) for r in recorded]
            for item in items:
                if on_result is not None:
                    await on_result(item)
            if then is not None:
                await then(items)
            return items
        batch = _BatchClaim(claim_key, claim.token, unrecorded=sum(r is None for r in recorded),
                            fresh_until=asked + self.claim_ttl_s / 3)
        try:
            async with renewed(self.steps, claim_key, claim.token, ttl_s=self.claim_ttl_s):
                items, handed = await self._execute(env, recorded, batch, on_result=on_result, cancel=cancel,
                                                    then=then)
            if then is not None and not handed:
                await then(items)
            return items
        finally:
            # A redelivery finds the records, or (a cancelled call is not recorded, a
            # failure here) may run what is missing at once. The batch's last record
            # dropped the claim already, in its own script (one round trip fewer).
            if not batch.released:
                with contextlib.suppress(Exception):
                    await self.steps.release(claim_key, claim.token)

    async def _execute(self, env: ExecuteTools, recorded: list[dict[str, Any] | None], claim: _BatchClaim,
                       *, on_result: ResultCallback | None, cancel: CancelSignal | None,
                       then: ResultsCallback | None) -> tuple[list[ToolResultItem], bool]:
        """The results, and whether they were handed to `then` already (a single call's,
        while its record was written)."""
        calls = env.calls
        tools = [self.catalog.resolve(c.name) for c in calls]
        if self.refresh is not None and env.recording is None and any(
                rec is None and t is None and c.tool_use_id not in env.denied
                for c, t, rec in zip(calls, tools, recorded, strict=True)):
            await self.refresh()
            tools = [self.catalog.resolve(c.name) for c in calls]

        # A denied call never runs, so it orders nothing.
        plan = stage(calls, [Hint() if c.tool_use_id in env.denied else hint_of(t)
                             for c, t in zip(calls, tools, strict=True)],
                     known=lambda name: self.catalog.resolve(name) is not None)
        finished = [asyncio.Event() for _ in calls]
        outcomes: dict[int, ToolResultItem] = {}
        handed = False

        async def run(i: int) -> ToolResultItem:
            nonlocal handed
            ran: tuple[str, float] | None = None  # its outcome label and duration, counted at the end
            try:
                if recorded[i] is not None:
                    item = ToolResultItem.model_validate(recorded[i])
                else:
                    for j in () if i in plan.refused else plan.after[i]:  # a refused call waits on nothing
                        await finished[j].wait()
                    started = time.monotonic()
                    item, keep = await self._run_one(env, calls[i], tools[i], cancel=cancel,
                                                     refused=plan.refused.get(i) or _failed_need(calls, plan, outcomes, i=i))
                    ran = (_outcome(item, keep, tools[i] is not None), time.monotonic() - started)
                    if self.blobs is not None:
                        item.content = await externalize(item.content, self.blobs, self.large_content_bytes)
                    if keep:
                        # Under this worker's claim only (one that lost it raises StepHeld
                        # and publishes nothing); a result recorded first stands.
                        last = claim.unrecorded == 1  # the batch's last record: it drops the claim
                        record = self.steps.record_claimed(
                            claim.key, claim.token, keys.tool_call_step(env.session_id, item.tool_use_id),
                            value=item.model_dump(mode="json"), release=last)
                        if then is not None and len(calls) == 1 and time.monotonic() < claim.fresh_until:
                            # A fresh claim: the record stands as written (module docstring).
                            await asyncio.gather(record, then([item]))
                            handed = True
                        else:
                            item = ToolResultItem.model_validate(await record)
                        claim.unrecorded -= 1
                        claim.released = last
                outcomes[i] = item
                if on_result is not None:
                    await on_result(item)
                return item
            finally:
                finished[i].set()
                if ran is not None:  # after the record and the hand-over: off the hop's path
                    metrics.observe_tool_call(calls[i].name, *ran)

        if len(calls) == 1:
            return [await run(0)], handed  # nothing to run beside it: no task group
        try:
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(run(i)) for i in range(len(calls))]
        except BaseExceptionGroup as group:
            # A failure here is ours (recording, emitting), not a tool's: surface the first.
            raise group.exceptions[0] from None
        return [t.result() for t in tasks], handed

    async def _run_one(self, env: ExecuteTools, call: ToolCall, tool: ResolvedTool | None,
                       *, cancel: CancelSignal | None, refused: str | None = None) -> tuple[ToolResultItem, bool]:
        """One call's result, and whether to record it (a cancelled call is not: the same
        tool_use_id may be asked for again and must then really run). `refused`: the
        staging's reason not to run it."""
        def error(text: str) -> tuple[ToolResultItem, bool]:
            return ToolResultItem(tool_use_id=call.tool_use_id, name=call.name, content=text,
                                  is_error=True), True

        if call.tool_use_id in env.denied:
            return error(f"tool {call.name} was not run: {env.denied[call.tool_use_id] or 'denied'}")
        if env.recording is not None:
            # A replay with recorded tools: the recording answers, whether or not a
            # provider of the tool runs now; nothing is executed.
            if self.recordings is None:
                return error(f"tool {call.name} was not run: this tools service answers no recordings")
            return await self.recordings.answer(env, call), True
        if tool is None:
            return error(f"unknown tool: {call.name}")
        if refused is not None:
            return error(refused)
        problem = validation_problem(tool, call.input)
        if problem is not None:
            return error(f"invalid input for tool {call.name}: {problem}")
        if cancel is not None and cancel.is_set():
            return error(f"tool {call.name} was cancelled before it ran")[0], False

        timeout = (tool.timeout_s if isinstance(tool, PythonTool | McpTool) else None) or self.default_timeout_s
        deadline = asyncio.timeout(timeout)
        with tracing.execute_tool_span(call.name, call.tool_use_id, arguments=call.input,
                                         conversation_id=env.session_id, parent=env.trace) as span:
            try:
                async with deadline:
                    outcome = await unless_cancelled(self._invoke(env, call, tool, timeout=timeout), cancel)
            except StepCancelled:
                return error(f"tool {call.name} was cancelled")[0], False
            except TimeoutError:
                if deadline.expired():
                    return error(f"tool {call.name} timed out after {timeout:g}s")
                return error(f"tool {call.name} failed: timed out")
            except ToolError as exc:
                return error(str(exc))
            except McpUnavailable as exc:
                return error(f"tool {call.name} is unavailable: {exc}")
            except ProviderUnavailable:
                return error(f"tool {call.name} is unavailable: no provider answered")
            except Exception as exc:  # a tool's own failure: the model reads it
                log.info("tool %s raised %s", call.name, exc, exc_info=True)
                return error(f"tool {call.name} failed: {type(exc).__name__}: {exc}")
            tracing.record_tool_result(span, outcome.content, is_error=outcome.is_error)
        if outcome.protocol_error is not None and self.on_protocol_error is not None:
            await self.on_protocol_error(env, call, outcome.protocol_error)
        return ToolResultItem(tool_use_id=call.tool_use_id, name=call.name, content=outcome.content,
                              is_error=outcome.is_error), True

    async def _invoke(self, env: ExecuteTools, call: ToolCall, tool: ResolvedTool,
                      *, timeout: float) -> Outcome:
        retry = getattr(tool, "retry", None)
        if retry is None or retry.retries == 0:
            return await self._invoke_once(env, call, tool, timeout=timeout)
        return await with_retries(lambda: self._invoke_once(env, call, tool, timeout=timeout), retry,
                                  (ProviderUnavailable, TransientToolError))

    async def _invoke_once(self, env: ExecuteTools, call: ToolCall, tool: ResolvedTool,
                           *, timeout: float) -> Outcome:
        if isinstance(tool, PythonTool):
            return await call_python(tool, call.input, session_id=env.session_id, tool_use_id=call.tool_use_id,
                                     user_id=env.user_id, workspace_id=env.workspace_id)
        if isinstance(tool, McpTool):
            return await tool.call(call.input, session_id=env.session_id, tool_use_id=call.tool_use_id,
                                   context=context_headers(env.user_id, env.workspace_id))
        if self.nc is None:
            raise ProviderUnavailable("no NATS connection")
        # Our own deadline fires first; nats' request timeout is only a backstop.
        table = self.catalog.providers
        subject = tool.subject
        return await call_provider(self.nc, subject, call.input, session_id=env.session_id,
                                   tool_use_id=call.tool_use_id, timeout_s=timeout + 1.0,
                                   attempt_timeout_s=self.attempt_timeout_s,
                                   context=context_headers(env.user_id, env.workspace_id),
                                   instances=(lambda: table.instances_on(subject)) if table is not None else None)


def validation_problem(tool: ResolvedTool, arguments: dict[str, Any], limit: int = 3) -> str | None:
    """None when `arguments` satisfy the tool's schema, else what is wrong: the most
    relevant errors first (a missing field and an unexpected one are both worth saying),
    each with its place."""
    validator = tool.validator
    if validator is None or validator.is_valid(arguments):  # valid: no sort of no errors
        return None
    errors = sorted(validator.iter_errors(arguments), key=relevance, reverse=True)
    if not errors:
        return None
    parts = []
    for top in errors[:limit]:
        err = best_match([top]) or top  # descends into anyOf/oneOf to the telling error
        where = "/".join(str(p) for p in err.absolute_path)
        parts.append(f"{err.message} (at /{where})" if where else err.message)
    return "; ".join(parts)


def _failed_need(calls: list[ToolCall], plan: Staging, outcomes: dict[int, ToolResultItem],
                 *, i: int) -> str | None:
    """Why call `i` is not run when a call it depends on failed, else None."""
    failed = [calls[j] for j in sorted(plan.needs[i]) if j in outcomes and outcomes[j].is_error]
    if not failed:
        return None
    named = ", ".join(f"{c.name} ({c.tool_use_id})" for c in failed)
    return f"tool {calls[i].name} was not run: it depends on {named}, which failed"
