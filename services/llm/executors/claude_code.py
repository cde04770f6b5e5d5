"""Claude Code as an executor: `claude -p` with stream-json in and out.

    claude -p --input-format stream-json --output-format stream-json --verbose
           --include-partial-messages --model M --permission-prompt-tool stdio
           [--session-id NEW | --resume ID] [--append-system-prompt S] [--max-turns N]
           [--max-budget-usd D]
           [--disallowedTools A,B] [--mcp-config FILE --strict-mcp-config]

- The prompt is one stream-json user message on stdin; a steer is another one. stdin
  is closed after the `result` line, and the agent exits.
- Permissions: with `--permission-prompt-tool stdio` every tool call that needs a
  permission arrives as a `control_request` `can_use_tool`, answered by a
  `control_response` `allow` / `deny` (`respond`). Tools denied by the run never reach
  the agent (`--disallowedTools`).
- Its session: a new one gets an id of loopwire's choosing (`--session-id`, a UUID), so
  the id is known before the agent writes anything; `--resume ID` continues one. Its
  files live in `$CLAUDE_CONFIG_DIR/projects/<cwd, / and . as ->/<id>.jsonl`.
- Its context: `/compact` as the prompt makes it compact its own context (a
  `compact_boundary` line follows).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from loopwire.shared.contract.messages import ContentBlock, text_block

from ..settings import LlmSettings
from .agent_process import AgentProcess
from .base import (
    Executor,
    ExecutorEvent,
    ExecutorFailed,
    ExecutorRun,
    ExecutorTask,
    Finished,
    PermissionRequest,
)
from .claude_stream import ClaudeStream
from .workdirs import agent_home

log = logging.getLogger("loopwire.llm.executors.claude_code")

COMPACT_PROMPT = "/compact"
DENY_ALWAYS = ("AskUserQuestion", "EnterPlanMode", "ExitPlanMode")
"""Tools that wait for a person at a terminal: no one is there."""


def session_file(config_dir: Path, cwd: Path, session: str) -> Path:
    """Where Claude Code keeps session `session` of a run in `cwd`."""
    return config_dir / "projects" / re.sub(r"[^A-Za-z0-9]", "-", str(cwd)) / f"{session}.jsonl"


def user_line(content: list[ContentBlock] | str) -> bytes:
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    return (json.dumps({"type": "user", "message": {"role": "user", "content": blocks}}) + "\n").encode()


class ClaudeCodeExecutor(Executor):
    profile = "claude_code"
    compacts_itself = True

    def __init__(self, settings: LlmSettings, argv: list[str]) -> None:
        self.settings = settings
        self.argv = argv

    @property
    def config_dir(self) -> Path:
        """The operator's CLAUDE_CONFIG_DIR, else the agent's own home under the executor
        directory (where its sessions are, for --resume)."""
        configured = os.environ.get("CLAUDE_CONFIG_DIR")
        return Path(configured) if configured else agent_home(self.settings, "claude_code")

    def session_reachable(self, agent_session: str, cwd: Path) -> bool:
        return session_file(self.config_dir, cwd, agent_session).is_file()

    def command(self, task: ExecutorTask, mcp_config: Path | None) -> list[str]:
        argv = [*self.argv, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
                "--include-partial-messages", "--model", task.model, "--permission-prompt-tool", "stdio"]
        if task.resume:
            argv += ["--resume", task.resume]
        elif task.new_session:
            argv += ["--session-id", task.new_session]
        if task.system:
            argv += ["--append-system-prompt", task.system]
        if task.max_turns is not None:
            argv += ["--max-turns", str(max(1, task.max_turns))]
        if task.max_cost_usd is not None:
            argv += ["--max-budget-usd", f"{max(task.max_cost_usd, 0.0):.6f}"]
        denied = sorted({*DENY_ALWAYS, *(n for n, p in task.permissions.items() if p == "deny")})
        argv += ["--disallowedTools", ",".join(_agent_name(n, task) for n in denied)]
        if mcp_config is not None:
            argv += ["--mcp-config", str(mcp_config), "--strict-mcp-config"]
        return argv

    def environment(self, task: ExecutorTask) -> dict[str, str]:
        env = dict(task.env)
        env.update(IS_SANDBOX="1", DISABLE_TELEMETRY="1", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                   DISABLE_AUTOUPDATER="1", CLAUDE_CONFIG_DIR=str(self.config_dir))
        return env

    async def start(self, task: ExecutorTask) -> ExecutorRun:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        mcp_config = _write_mcp_config(task)
        process = AgentProcess(self.command(task, mcp_config), task.cwd, self.environment(task))
        try:
            await process.start()
        except OSError as exc:
            _remove(mcp_config)
            raise ExecutorFailed("executor_unavailable", f"Claude Code did not start: {exc}") from None
        run = ClaudeCodeRun(process, mcp_config)
        first = [text_block(COMPACT_PROMPT)] if task.compact_first else task.prompt
        run.queued = [task.prompt] if task.compact_first else []
        await run.send(first)
        return run


class ClaudeCodeRun(ExecutorRun):
    def __init__(self, process: AgentProcess, mcp_config: Path | None) -> None:
        self.process = process
        self.mcp_config = mcp_config
        self.stream = ClaudeStream()
        self.queued: list[list[ContentBlock]] = []
        """Prompts that follow the current one (after `/compact`: the step's own)."""
        self._open = 0
        """User messages sent whose `result` has not come yet."""
        self._closed = False
        self._carried: Finished | None = None
        """The result of a turn before the step's own (a `/compact`): added to its cost."""

    def _carry(self, finished: Finished) -> Finished:
        before, self._carried = self._carried, None
        if before is None:
            return finished
        cost = None if finished.cost_usd is None or before.cost_usd is None else finished.cost_usd + before.cost_usd
        return dataclasses.replace(finished, usage=before.usage + finished.usage, cost_usd=cost,
                                   turns=before.turns + finished.turns)

    async def send(self, content: list[ContentBlock]) -> None:
        self._open += 1
        await self.process.write(user_line(content))

    async def events(self) -> AsyncIterator[ExecutorEvent]:
        try:
            async for raw in self.process.lines():
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    log.debug("claude code wrote a line that is not JSON: %.200r", raw)
                    continue
                if not isinstance(line, dict):
                    continue
                if line.get("type") == "control_request":
                    await self._control(line)
                for event in self.stream.feed(line):
                    if isinstance(event, Finished):
                        self._open -= 1
                        event = self._carry(event)
                        if self.queued and not event.is_error:
                            self._carried = event  # the compaction is done: the step's prompt
                            await self.send(self.queued.pop(0))
                            continue
                        if self._open <= 0:
                            self.process.close_stdin()  # nothing more to say: it exits
                    yield event
        finally:
            await self.process.wait(1.0)
        code = self.process.proc.returncode if self.process.proc is not None else None
        if self._open > 0 and not self._closed:
            tail = " | ".join(list(self.process.stderr_tail)[-5:])
            raise ExecutorFailed("executor_failed", f"Claude Code ended without an answer (exit {code}): "
                                 f"{tail or 'no message'}", retryable=False)

    async def _control(self, line: dict[str, Any]) -> None:
        """Control requests other than permissions (hooks, MCP messages of SDK servers) are
        not used by loopwire: answered with an error so the agent does not wait."""
        if (line.get("request") or {}).get("subtype") == "can_use_tool":
            return
        await self.process.write((json.dumps({"type": "control_response", "response": {
            "subtype": "error", "request_id": line.get("request_id"),
            "error": "not supported by loopwire"}}) + "\n").encode())

    async def respond(self, request: PermissionRequest, allow: bool, message: str | None = None) -> None:
        answer: dict[str, Any] = ({"behavior": "allow", "updatedInput": request.input} if allow
                                  else {"behavior": "deny", "message": message or "denied"})
        await self.process.write((json.dumps({"type": "control_response", "response": {
            "subtype": "success", "request_id": request.request_id, "response": answer}}) + "\n").encode())

    async def steer(self, content: list[ContentBlock]) -> None:
        await self.send(content)

    async def cancel(self) -> None:
        self._closed = True
        await self.process.stop()
        _remove(self.mcp_config)
        self.mcp_config = None

    async def aclose(self) -> None:
        await self.cancel()


def _agent_name(name: str, task: ExecutorTask) -> str:
    """A loopwire tool's name as Claude Code knows it (a tool of the `loopwire` MCP server)."""
    if task.mcp is not None and any(t.name == name for t in task.tools):
        return f"mcp__{task.mcp.server_name}__{name}"
    return name


def _write_mcp_config(task: ExecutorTask) -> Path | None:
    """The MCP configuration file (its bearer token is a secret: mode 0600, removed at the
    end; a command line would show it to every process of the machine)."""
    if task.mcp is None or not task.tools:
        return None
    config = {"mcpServers": {task.mcp.server_name: {"type": "http", "url": task.mcp.url,
                                                    "headers": dict(task.mcp.headers)}}}
    path = task.scratch / f"mcp-{os.getpid()}-{task.step_id.replace(':', '_')}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(config, fh)
    return path


def _remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
