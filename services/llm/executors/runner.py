"""One generation step answered by an external agent: `Generate` in, `GenerationResult` out.

    the step's ExecutorSpec -> the executor (registry.py; a refusal is the step's error)
      -> the agent's session (agent_sessions.py): resume it when its files are here, else a
         new one; the prompt is what the agent has not been given yet (prompt.py)
      -> the run's loopwire tools over MCP (mcp_bridge.py), the agent's environment
      -> the agent's events as loopwire events (StepEvents) and its permission requests
         answered by the run's permissions (`approve`: permissions.py, a checkpoint)
      -> its answer: the result (usage, cost, its turns), or the step's error

The step's own machinery stays the llm service's (service.py): the claim and record of the
step, the heartbeat, the cancel notices (steer, abort), whose cancellation stops the agent
and its children here (`aclose` in every exit path). A budget the agent reports past, or
`LOOPWIRE_EXECUTOR_TIMEOUT_S`, stops it too.

After a crash the redelivered step finds the record written before the agent took its
input: with the agent's files reachable it resumes the agent's session and tells it to go
on (prompt.RESUMED); without them (another machine), it starts a new agent session whose
prompt is the conversation so far. The llm service has retracted the lost text already.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import ExecutorSpec, Generate, GenerationResult, StepError, Usage
from loopwire.shared.contract.event_fields import (
    CompactionFields,
    EventFields,
    MessageFields,
    PlanStatus,
    PlanUpdatedFields,
    RetractedFields,
    TextDeltaFields,
    ToolCallFields,
    tool_result_event,
)
from loopwire.shared.contract.messages import message_text, text_block, tool_uses
from loopwire.shared.runtime.inflight import CancelSignal, StepCancelled, unless_cancelled
from loopwire.shared.runtime.pricing import cost_usd, price_table
from loopwire.shared.runtime.service_context import ServiceContext

from ..settings import LlmSettings
from .agent_sessions import AgentSession, AgentSessions
from .base import (
    AssistantMessage,
    Compacted,
    ExecutorEvent,
    ExecutorFailed,
    ExecutorRun,
    ExecutorTask,
    Finished,
    PermissionRequest,
    PlanUpdated,
    SessionStarted,
    TextDelta,
    ToolCall,
    ToolResult,
)
from .permissions import PermissionGate
from .prompt import RESUMED, blocks, new_input
from .registry import Executors
from .workdirs import scratch_dir, session_dir

if TYPE_CHECKING:  # the MCP SDK loads with the first executor step (a third of the llm's memory)
    from .mcp_bridge import McpBridge, StepTools

log = logging.getLogger("loopwire.llm.executors")

SESSION_NAMESPACE = uuid.UUID("6f1d3c52-7a51-4c1e-9a8e-2d0f3b6f9e11")
CANCELLED_REASON = "cancelled: the partial answer is void"
DENIED = "denied by the run's tool permissions"
CHARS_PER_TOKEN = 4
"""The rough estimate of a transcript's tokens (the fresh session's `tokens_after`)."""
FRESH_SESSION_SHARE = 0.25
"""A fresh agent session's transcript takes at most this share of the compaction threshold."""
HIDDEN_ENV_PREFIXES = ("LOOPWIRE_",)
"""The llm service's own settings (NATS and Redis credentials among them) stay out of the
agent's environment; the agent's own variables (ANTHROPIC_*, OPENAI_*, PATH, HOME) pass."""


def agent_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    return {k: v for k, v in env.items() if not k.startswith(HIDDEN_ENV_PREFIXES)}


class ExecutorSteps:
    def __init__(self, ctx: ServiceContext[LlmSettings]) -> None:
        self.ctx = ctx
        self.executors = Executors(ctx.settings)
        self.sessions = AgentSessions(ctx.redis, ctx.settings.session_ttl_s)
        self.permissions = PermissionGate(ctx)
        self._bridge: McpBridge | None = None
        self._active: dict[str, tuple[str, ExecutorRun]] = {}
        """session id -> (step id, run) of the agent running here for it."""

    async def start(self) -> None:
        await self.permissions.start()

    @property
    def bridge(self) -> McpBridge:
        """The MCP endpoint of the runs' loopwire tools, made with the first step that
        offers tools: a process that never runs an external agent never loads MCP."""
        if self._bridge is None:
            from .mcp_bridge import McpBridge

            self._bridge = McpBridge(self.ctx)
        return self._bridge

    async def stop(self) -> None:
        await self.permissions.stop()
        if self._bridge is not None:
            await self._bridge.stop()

    async def generate(self, env: Generate, delivered: int, cancel: CancelSignal | None) -> GenerationResult:
        spec = env.executor
        assert spec is not None
        events = StepEvents(self.ctx, env, delivered)
        try:
            return await unless_cancelled(self._run(env, spec, delivered, events=events), cancel)
        except StepCancelled:
            if events.streamed:
                await self.ctx.bus.emit(env.session_id, env.run_id, "retracted",
                                        key=message_ids.retract_key(env.step_id, "cancel"), fields=RetractedFields(turn=env.turn, reason=CANCELLED_REASON))
            log.info("executor step %s cancelled", env.step_id)
            return failed(env, "cancelled", "the agent's turn was cancelled (steer or abort)")
        except ExecutorFailed as err:
            log.warning("executor step %s failed: %s %s", env.step_id, err.code, err.message)
            return failed(env, err.code, err.message, retryable=err.retryable)

    async def _run(self, env: Generate, spec: ExecutorSpec, delivered: int, *, events: StepEvents) -> GenerationResult:
        settings = self.ctx.settings
        earlier = self._active.get(env.session_id)
        if earlier is not None and earlier[0] != env.step_id:
            # A newer step of the session: the earlier one was abandoned (a steer whose
            # cancel notice did not arrive). Two agents must not share one agent session.
            log.info("session %s: stopping the agent of abandoned step %s", env.session_id, earlier[0])
            await earlier[1].cancel()
        executor = self.executors.get(spec.profile, spec.agent)
        cwd = Path(spec.workspace) if spec.workspace else session_dir(settings, env.session_id)
        if not cwd.is_dir():
            raise ExecutorFailed("workspace_missing", f"the run's workspace {cwd} is not a directory here")
        record = await self.sessions.get(env.session_id)
        resume: str | None = None
        given: int | None = None
        if record is not None and record.same_agent(spec.profile, spec.agent) and record.cwd == str(cwd) \
                and record.agent_session and executor.session_reachable(record.agent_session, cwd):
            resume, given = record.agent_session, record.given
        redelivered = resume is not None and record is not None and record.step_id == env.step_id
        context_tokens = max(spec.context_tokens, record.context_tokens if record is not None and resume else 0)
        compact = resume is not None and context_tokens >= spec.compaction_at_pct * spec.context_window
        fresh_start = compact and not executor.compacts_itself and not redelivered
        if fresh_start:
            # ContextGuard for an agent without a compaction command: a new agent session,
            # told the conversation in a transcript trimmed to a quarter of the threshold.
            resume = given = None
        if redelivered:
            prompt, total = [text_block(RESUMED)], len(blocks(env.messages))
        elif fresh_start:
            budget = int(spec.compaction_at_pct * spec.context_window * CHARS_PER_TOKEN * FRESH_SESSION_SHARE)
            prompt, total = new_input(env.messages, None, max_chars=budget)
            after = sum(len(b.get("text", "")) for b in prompt) // CHARS_PER_TOKEN
            await events.compacted(tokens_before=context_tokens, tokens_after=after,
                                   messages=len(env.messages))
            context_tokens = after
        else:
            prompt, total = new_input(env.messages, given)
        if not prompt:
            prompt = [text_block("Continue.")]
        new_session = None if resume else str(uuid.uuid5(SESSION_NAMESPACE, f"{env.session_id}:{env.step_id}:{delivered}"))
        mine = AgentSession(profile=spec.profile, agent=spec.agent, agent_session=resume or new_session or "",
                            cwd=str(cwd), given=total, step_id=env.step_id, context_tokens=context_tokens)
        await self.sessions.put(env.session_id, mine)  # before the agent takes the input

        from .mcp_bridge import StepTools

        step_tools = StepTools(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id,
                               tools=list(env.tools), permissions=dict(spec.permissions), turn=events.current_turn,
                               user_id=spec.user_id, workspace_id=spec.workspace_id)
        endpoint = await self.bridge.open(step_tools) if env.tools else None
        task = ExecutorTask(
            session_id=env.session_id, run_id=env.run_id, step_id=env.step_id, turn=env.turn,
            profile=spec.profile, agent=spec.agent, model=env.models[0] if env.models else settings.default_model,
            prompt=prompt, cwd=cwd, system=env.system, resume=resume, new_session=new_session,
            scratch=scratch_dir(settings), permissions=dict(spec.permissions), tools=list(env.tools), mcp=endpoint,
            max_turns=spec.max_turns, max_cost_usd=spec.max_cost_usd, env=agent_environment(),
            compact_first=compact and executor.compacts_itself)
        run: ExecutorRun | None = None
        try:
            async with asyncio.timeout(settings.executor_timeout_s):
                run = await executor.start(task)
                self._active[env.session_id] = (env.step_id, run)
                finished = await self._follow(env, spec, run, events=events, record=mine, step_tools=step_tools)
        except TimeoutError:
            raise ExecutorFailed("timeout", f"the agent's turn took longer than {settings.executor_timeout_s:g} s "
                                 "(LOOPWIRE_EXECUTOR_TIMEOUT_S)") from None
        finally:
            if run is not None:
                await run.aclose()
                if self._active.get(env.session_id, (None, None))[1] is run:
                    del self._active[env.session_id]
            if endpoint is not None:
                self.bridge.close(step_tools)
        mine.context_tokens = finished.context_tokens
        mine.agent_session = finished.agent_session or mine.agent_session
        await self.sessions.put(env.session_id, mine)
        if finished.is_error:
            raise ExecutorFailed("executor_failed", f"the agent's turn failed: {finished.error}")
        return await events.result(finished)

    async def _follow(self, env: Generate, spec: ExecutorSpec, run: ExecutorRun, *, events: StepEvents,
                      record: AgentSession, step_tools: StepTools) -> Finished:
        async for event in run.events():
            if isinstance(event, SessionStarted):
                if event.agent_session != record.agent_session:
                    record.agent_session = event.agent_session
                    await self.sessions.put(env.session_id, record)
            elif isinstance(event, PermissionRequest):
                allowed, note = await self._permission(env, spec, event, turn=events.current_turn())
                if allowed:
                    step_tools.approved.add(event.tool_use_id)
                await run.respond(event, allowed, note)
            elif isinstance(event, Finished):
                return event
            else:
                await events.report(event)
                over = events.over_budget(spec)
                if over is not None:
                    log.info("executor step %s: %s reached, stopping the agent", env.step_id, over)
                    await run.cancel()
                    return events.stopped_at_budget()
        raise ExecutorFailed("executor_failed", "the agent ended its turn without an answer")

    async def _permission(self, env: Generate, spec: ExecutorSpec, request: PermissionRequest,
                          *, turn: int) -> tuple[bool, str | None]:
        permission = spec.permissions.get(request.name, "auto")
        if permission == "deny":
            return False, DENIED
        if permission == "approve":
            approved, note = await self.permissions.ask(env, request, turn)
            return approved, None if approved else f"denied by the user: {note or 'no reason given'}"
        return True, None


class StepEvents:
    """The agent's events as loopwire events, numbered by the agent's model calls: the
    k-th call of a step starting at turn t is turn t + k."""

    def __init__(self, ctx: ServiceContext[LlmSettings], env: Generate, delivered: int) -> None:
        self.ctx = ctx
        self.env = env
        self.delivered = delivered
        self.calls = 0
        self.usage = Usage()
        self.cost: float | None = 0.0
        self.streamed = False
        self.last_text = ""
        self._turn_of: dict[str, int] = {}
        """tool_use_id -> the turn of the call that made it (for its result)."""
        self._held: AssistantMessage | None = None
        """The latest assistant turn: reported when another follows; the last one is the
        step's answer, reported by the router with the result."""

    def current_turn(self) -> int:
        return self.env.turn + max(0, self.calls - 1) if self.calls else self.env.turn

    async def _emit(self, kind: str, key: str | None, fields: EventFields) -> None:
        await self.ctx.bus.emit(self.env.session_id, self.env.run_id, kind, key=key, fields=fields)

    async def compacted(self, *, tokens_before: int, tokens_after: int, messages: int) -> None:
        """ContextGuard started a fresh agent session (`fresh_session`): the `compaction` event."""
        await self._emit("compaction", message_ids.step_event_key(self.env.step_id, "compaction", "fresh"),
                         CompactionFields(tokens_before=tokens_before, tokens_after=tokens_after, method="fresh_session",
                         messages_compacted=messages))

    async def report(self, event: ExecutorEvent) -> None:
        env, step = self.env, message_ids.executor_delivery(self.env.step_id, self.delivered)
        if isinstance(event, TextDelta):
            self.streamed = True
            await self._emit("text.delta", None, TextDeltaFields(turn=self._next_turn(), text=event.text))
        elif isinstance(event, AssistantMessage):
            await self._release()
            self.calls += 1
            self._held = event
            if event.usage is not None:
                self.usage = self.usage + event.usage
                price = cost_usd(event.model or env.models[0], event.usage,
                                 price_table(self.ctx.settings.prices)) if env.models else None
                self.cost = None if price is None or self.cost is None else self.cost + price
            text = message_text(event.message)
            if text.strip():
                self.last_text = text
        elif isinstance(event, ToolCall | ToolResult):
            await self._release()
            if isinstance(event, ToolCall):
                self._turn_of[event.tool_use_id] = self.current_turn()
            if event.loopwire_tool is not None:
                return  # a loopwire tool: the tools service reports the call (mcp_bridge.py)
            if isinstance(event, ToolCall):
                turn = self._turn_of[event.tool_use_id] = self.current_turn()
                await self._emit("tool.call", message_ids.tool_call_key(event.tool_use_id), ToolCallFields(turn=turn,
                                 tool_use_id=event.tool_use_id, name=event.name, input=event.input, source="executor"))
            else:
                turn = self._turn_of.get(event.tool_use_id, self.current_turn())
                await self._emit("tool.result", message_ids.tool_result_key(event.tool_use_id),
                                 tool_result_event(turn=turn, tool_use_id=event.tool_use_id, name=event.name,
                                                     is_error=event.is_error, content=event.content, source="executor"))
        elif isinstance(event, PlanUpdated):
            await self._emit("plan.updated", message_ids.step_event_key(step, "plan", self.calls, len(event.entries)),
                             PlanUpdatedFields(steps=[{"step": str(e.get("content", "")), "status": _plan_status(e.get("status"))}
                                    for e in event.entries], source="executor", phase="act"))
        elif isinstance(event, Compacted):
            await self._emit("compaction", message_ids.step_event_key(step, "compaction", self.calls), CompactionFields(tokens_before=event.tokens_before,
                             tokens_after=event.tokens_after if event.tokens_after is not None else 0,
                             method=f"agent_{event.trigger}"))

    def _next_turn(self) -> int:
        """The turn text being streamed belongs to: the call after the last finished one."""
        return self.env.turn + self.calls

    async def _release(self) -> None:
        held, self._held = self._held, None
        if held is None:
            return
        usage = held.usage or Usage()
        await self._emit("message", message_ids.step_event_key(message_ids.executor_delivery(self.env.step_id, self.delivered), "message", self.calls),
                         MessageFields(turn=self.env.turn + self.calls - 1, message=held.message, model=held.model,
                         stop_reason=held.stop_reason, source="executor",
                         usage={"input_tokens": usage.total_input(), "output_tokens": usage.output_tokens}))

    def over_budget(self, spec: ExecutorSpec) -> str | None:
        used = self.usage.total_input() + self.usage.output_tokens
        if spec.max_total_tokens is not None and used >= spec.max_total_tokens:
            return "max_total_tokens"
        if spec.max_cost_usd is not None and self.cost is not None and self.cost >= spec.max_cost_usd:
            return "max_cost_usd"
        return None

    def stopped_at_budget(self) -> Finished:
        return Finished(text=self.last_text, usage=self.usage, cost_usd=self.cost, turns=max(1, self.calls),
                        stop_reason="budget")

    async def result(self, finished: Finished) -> GenerationResult:
        """The step's answer: the agent's final text as one assistant message (its tool
        calls were reported as they happened and are not the router's to run). A last
        turn that called tools (the agent stopped at a limit) is reported as it was."""
        held = self._held
        if held is not None and tool_uses(held.message):
            await self._release()
        text = finished.text or self.last_text
        env = self.env
        return GenerationResult(
            session_id=env.session_id, run_id=env.run_id, step_id=env.step_id, turn=env.turn, trace=dict(env.trace),
            extra_usage=env.extra_usage, extra_model=env.extra_model, ok=True,
            message={"role": "assistant", "content": [{"type": "text", "text": text}] if text else []},
            stop_reason=finished.stop_reason, model=held.model if held is not None and held.model else
            (env.models[0] if env.models else None),
            usage=finished.usage, turns=max(1, finished.turns), cost_usd=finished.cost_usd)


def _plan_status(raw: Any) -> PlanStatus:
    return raw if raw in ("pending", "in_progress", "completed") else "pending"


def failed(env: Generate, code: str, message: str, *, retryable: bool = False) -> GenerationResult:
    return GenerationResult(session_id=env.session_id, run_id=env.run_id, step_id=env.step_id, turn=env.turn,
                            trace=dict(env.trace), extra_usage=env.extra_usage, extra_model=env.extra_model, ok=False,
                            model=env.models[0] if env.models else None,
                            error=StepError(code=code, message=message, retryable=retryable))

