"""Any Agent Client Protocol agent as an executor (profile `acp`), through the official
Python SDK (`agent-client-protocol`, import `acp`) as the client side.

    initialize -> session/new (cwd, the loopwire MCP server)   a new agent session
               or session/load (its id)                        a follow-up: its history
    session/prompt (the step's prompt) -> session/update ... -> stopReason
    session/request_permission -> answered by the run's permissions (runner.py)

The agent is the operator's (`LOOPWIRE_ACP_AGENTS`, by the run's `executor.agent`), started
in its own process group like every agent (agent_process.py). The history `session/load`
replays as notifications is not the step's work: nothing is reported until the prompt
is sent.

What ACP leaves to each agent is passed in `_meta` the way `claude-code-acp` reads it
(others ignore it): `systemPrompt.append` (the step's reminders) and
`claudeCode.options` (`model`, `maxTurns`, `disallowedTools`: the run's `deny`). The
model also goes in the environment (`ANTHROPIC_MODEL`, `ANTHROPIC_DEFAULT_SONNET_MODEL`,
which claude-code-acp uses for its default model). A tool an agent runs without asking
cannot be held by `approve` here; a permission request for a denied tool is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from loopwire.shared.contract.messages import ContentBlock

from ..settings import LlmSettings
from .acp_stream import AcpStream
from .agent_process import AgentProcess
from .base import (
    Executor,
    ExecutorEvent,
    ExecutorFailed,
    ExecutorRun,
    ExecutorTask,
    PermissionRequest,
    SessionStarted,
)
from .claude_code import DENY_ALWAYS, session_file
from .claude_stream import permission_name
from .workdirs import agent_home

log = logging.getLogger("loopwire.llm.executors.acp")

START_TIMEOUT_S = 120.0
"""initialize and session/new or session/load, together."""


class AcpExecutor(Executor):
    profile = "acp"

    def __init__(self, settings: LlmSettings, argv: list[str]) -> None:
        self.settings = settings
        self.argv = argv

    @property
    def config_dir(self) -> Path:
        return agent_home(self.settings, "acp")

    def session_reachable(self, agent_session: str, cwd: Path) -> bool:
        """claude-code-acp keeps Claude Code's session files (here: under this agent home);
        an agent whose files loopwire cannot see starts over from the history."""
        return session_file(self.config_dir, cwd, agent_session).is_file()

    def environment(self, task: ExecutorTask) -> dict[str, str]:
        env = dict(task.env)
        env.update(IS_SANDBOX="1", DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                   DISABLE_AUTOUPDATER="1", CLAUDE_CONFIG_DIR=str(self.config_dir),
                   ANTHROPIC_MODEL=task.model, ANTHROPIC_DEFAULT_SONNET_MODEL=task.model)
        return env

    async def start(self, task: ExecutorTask) -> ExecutorRun:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        process = AgentProcess(self.argv, task.cwd, self.environment(task))
        try:
            await process.start()
        except OSError as exc:
            raise ExecutorFailed("executor_unavailable", f"the ACP agent did not start: {exc}") from None
        run = AcpRun(process, task)
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                await run.open()
        except BaseException as exc:
            await run.cancel()
            if isinstance(exc, ExecutorFailed):
                raise
            if isinstance(exc, Exception):
                tail = " | ".join(list(process.stderr_tail)[-5:])
                raise ExecutorFailed("executor_failed", f"the ACP agent did not open a session: "
                                     f"{type(exc).__name__}: {exc} {tail}".strip()) from None
            raise
        return run


class AcpRun(ExecutorRun):
    def __init__(self, process: AgentProcess, task: ExecutorTask) -> None:
        self.process = process
        self.task = task
        self.stream = AcpStream()
        self.session_id: str | None = None
        self._queue: asyncio.Queue[ExecutorEvent | BaseException | None] = asyncio.Queue()
        self._answers: dict[str, asyncio.Future[tuple[bool, str | None]]] = {}
        self._options: dict[str, list[Any]] = {}
        self._live = False
        self._conn: Any = None
        self._prompt: asyncio.Task[None] | None = None

    # -- the client side of the protocol (the SDK calls these) ---------------------------------
    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if not self._live:
            return  # session/load's replay of the history
        raw = update.model_dump(mode="json", by_alias=True, exclude_none=True)
        for event in self.stream.feed(raw):
            self._queue.put_nowait(event)

    async def request_permission(self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any) -> Any:
        from acp.schema import AllowedOutcome, DeniedOutcome, RequestPermissionResponse

        raw = tool_call.model_dump(mode="json", by_alias=True, exclude_none=True)
        request_id = str(raw.get("toolCallId"))
        answer: asyncio.Future[tuple[bool, str | None]] = asyncio.get_running_loop().create_future()
        self._answers[request_id] = answer
        self._options[request_id] = list(options)
        self._queue.put_nowait(PermissionRequest(request_id=request_id, tool_use_id=request_id,
                                                 name=permission_name(self.stream.name_of(raw)),
                                                 input=dict(raw.get("rawInput") or {})))
        allowed, _note = await answer
        kinds = ("allow_once", "allow_always") if allowed else ("reject_once", "reject_always")
        chosen = next((o for o in options if o.kind in kinds), None)
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen.option_id))

    def on_connect(self, conn: Any) -> None:
        pass

    # -- the step ---------------------------------------------------------------------------------
    async def open(self) -> None:
        from acp import PROTOCOL_VERSION, connect_to_agent
        from acp.schema import ClientCapabilities, HttpHeader, HttpMcpServer, Implementation

        proc = self.process.proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        self._conn = connect_to_agent(cast(Any, self), proc.stdin, proc.stdout)
        init = await self._conn.initialize(protocol_version=PROTOCOL_VERSION, client_capabilities=ClientCapabilities(),
                                           client_info=Implementation(name="loopwire", version="1"))
        task = self.task
        servers = []
        if task.mcp is not None and task.tools:
            servers.append(HttpMcpServer(type="http", name=task.mcp.server_name, url=task.mcp.url,
                                         headers=[HttpHeader(name=k, value=v) for k, v in task.mcp.headers.items()]))
        meta = self._meta()
        can_load = bool(getattr(init.agent_capabilities, "load_session", False))
        if task.resume and can_load:
            await self._conn.load_session(cwd=str(task.cwd), session_id=task.resume, mcp_servers=servers, **meta)
            self.session_id = task.resume
            tracker = getattr(self._conn, "_session_updates", None)
            if tracker is not None:  # the replayed history, handled before the step's own
                await tracker.wait(task.resume)
        else:
            if task.resume:
                raise ExecutorFailed("executor_failed", "the ACP agent cannot load sessions (no loadSession)")
            created = await self._conn.new_session(cwd=str(task.cwd), mcp_servers=servers, **meta)
            self.session_id = str(created.session_id)

    def _meta(self) -> dict[str, Any]:
        task = self.task
        denied = sorted({*DENY_ALWAYS, *(n for n, p in task.permissions.items() if p == "deny")})
        options: dict[str, Any] = {"model": task.model, "disallowedTools": denied}
        if task.max_turns is not None:
            options["maxTurns"] = max(1, task.max_turns)
        meta: dict[str, Any] = {"claudeCode": {"options": options}}
        if task.system:
            meta["systemPrompt"] = {"append": task.system}
        return meta

    async def events(self) -> AsyncIterator[ExecutorEvent]:
        from acp import text_block

        assert self.session_id is not None
        yield SessionStarted(self.session_id)
        blocks = [text_block(b["text"]) for b in self.task.prompt if b.get("type") == "text"] or [text_block("")]
        self._live = True
        self._prompt = asyncio.create_task(self._run_prompt(blocks))
        while True:
            item = await self._queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    async def _run_prompt(self, blocks: list[Any]) -> None:
        try:
            response = await self._conn.prompt(session_id=self.session_id, prompt=blocks)
            raw = response.model_dump(mode="json", by_alias=True, exclude_none=True)
            self._queue.put_nowait(self.stream.finished(str(raw.get("stopReason") or "end_turn"), raw.get("usage"),
                                                        self.session_id))
            self._queue.put_nowait(None)
        except asyncio.CancelledError:
            self._queue.put_nowait(None)
            raise
        except Exception as exc:
            tail = " | ".join(list(self.process.stderr_tail)[-5:])
            self._queue.put_nowait(ExecutorFailed("executor_failed", f"the ACP agent's prompt failed: {exc} {tail}"))

    async def respond(self, request: PermissionRequest, allow: bool, message: str | None = None) -> None:
        answer = self._answers.pop(request.request_id, None)
        if answer is not None and not answer.done():
            answer.set_result((allow, message))

    async def steer(self, content: list[ContentBlock]) -> None:
        """ACP: `session/cancel` ends the turn; the new message is the next prompt (the
        caller's next step)."""
        if self._conn is not None and self.session_id is not None:
            await self._conn.cancel(session_id=self.session_id)

    async def cancel(self) -> None:
        if self._prompt is not None and not self._prompt.done():
            self._prompt.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._prompt
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._conn.close(), 2)
        await self.process.stop()
