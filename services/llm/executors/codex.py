"""Codex as an executor: one `codex exec --json` process per step.

    codex [operator's flags] -c analytics.enabled=false -c check_for_update_on_startup=false
          [-c developer_instructions="…"] [-c mcp_servers.loopwire={url=…, env_http_headers=…}]
          [--disable shell_tool] [-c web_search="disabled"] [--disable multi_agent]
          exec --json --skip-git-repo-check -C CWD -m MODEL --sandbox workspace-write
          [resume THREAD_ID] -

- The prompt goes on stdin (`-`), which is then closed; the process ends after its turn.
  A `message` on an idle session runs `exec resume THREAD_ID`: Codex's thread keeps its
  history. Its files are `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-…-<thread id>.jsonl`:
  `CODEX_HOME` is the operator's when set (with their config.toml: model providers,
  credentials), else the agent's own home under LOOPWIRE_EXECUTOR_DIR.
- The model provider is Codex's own configuration (the operator's CODEX_HOME/config.toml,
  or `-c model_provider=…` flags in LOOPWIRE_CODEX_CMD); `model.primary` is its `-m`.
- The run's loopwire tools: an MCP server `loopwire` over streamable HTTP; the bearer
  header travels in the agent's environment (`env_http_headers`), not on its command
  line. It is `required` (the first model call waits for its tools), and its tools run
  without Codex's own approval prompt (`default_tools_approval_mode = "approve"`): the
  run's permissions are applied by the llm service that serves them.
- `deny` (and `approve`: `codex exec` has no one to ask) keeps a tool from Codex where its
  configuration can: `exec_command` / `write_stdin` (`--disable shell_tool`),
  `web_search`, the sub-agent tools (`--disable multi_agent`); `apply_patch` denied makes
  the sandbox read-only, since file edits also go through commands.
- Usage: Codex reports its thread's running total; the step's is the difference with the
  total its rollout file held before the step. Codex reports no cost: the step is priced
  with loopwire's price table (LOOPWIRE_PRICES), else its cost is unknown.
- `max_turns`: Codex has no such limit; the rebuilt turns are counted and the process is
  stopped when the limit is reached with calls still to make.
- A steer stops the running process and resumes the thread with the new message.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

from loopwire.shared.contract.envelopes import Usage
from loopwire.shared.contract.messages import ContentBlock
from loopwire.shared.runtime.pricing import cost_usd, price_table

from ..settings import LlmSettings
from .agent_process import AgentProcess
from .base import (
    AssistantMessage,
    Executor,
    ExecutorEvent,
    ExecutorFailed,
    ExecutorRun,
    ExecutorTask,
    Finished,
)
from .codex_stream import CodexStream, usage_of
from .one_shot import OneShotRun, kept_from_agent, start_with_prompt
from .workdirs import agent_home

log = logging.getLogger("loopwire.llm.executors.codex")

HEADER_ENV = "LOOPWIRE_TOOLS_HEADER_{}"
"""The agent's environment variables holding the MCP server's headers (its bearer token)."""
DENY_FLAGS: dict[str, list[str]] = {
    "exec_command": ["--disable", "shell_tool"],
    "write_stdin": ["--disable", "shell_tool"],
    "web_search": ["-c", 'web_search="disabled"'],
    "spawn_agent": ["--disable", "multi_agent"],
    "send_input": ["--disable", "multi_agent"],
    "wait": ["--disable", "multi_agent"],
    "close_agent": ["--disable", "multi_agent"],
}
SANDBOX_FLAGS = ("-s", "--sandbox", "sandbox_mode", "--dangerously-bypass-approvals-and-sandbox")
TAIL_BYTES = 256 * 1024


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's; non-ASCII stays as it is)."""
    return json.dumps(value, ensure_ascii=False)


def rollout_file(codex_home: Path, thread_id: str) -> Path | None:
    if not thread_id or "/" in thread_id:
        return None
    found = sorted((codex_home / "sessions").glob(f"*/*/*/rollout-*-{thread_id}.jsonl"))
    return found[-1] if found else None


def last_token_count(path: Path | None) -> dict[str, Any] | None:
    """The `info` of the last `token_count` event of a rollout file (totals so far and the
    last model call's usage), read from the file's end."""
    if path is None or not path.is_file():
        return None
    with path.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        for start in (max(0, size - TAIL_BYTES), 0):
            fh.seek(start)
            lines = fh.read().splitlines()
            for raw in reversed(lines[1:] if start else lines):
                if b'"token_count"' not in raw:
                    continue
                try:
                    payload = json.loads(raw).get("payload") or {}
                except (ValueError, AttributeError):
                    continue
                if payload.get("type") == "token_count" and isinstance(payload.get("info"), dict):
                    return dict(payload["info"])
            if start == 0:
                break
    return None


class CodexExecutor(Executor):
    profile = "codex"

    def __init__(self, settings: LlmSettings, argv: list[str]) -> None:
        self.settings = settings
        self.argv = argv

    @property
    def codex_home(self) -> Path:
        configured = os.environ.get("CODEX_HOME")
        return Path(configured) if configured else agent_home(self.settings, "codex")

    def session_reachable(self, agent_session: str, cwd: Path) -> bool:
        return rollout_file(self.codex_home, agent_session) is not None

    def command(self, task: ExecutorTask, resume: str | None = None) -> list[str]:
        argv = [*self.argv, "-c", "analytics.enabled=false", "-c", "check_for_update_on_startup=false"]
        if task.system:
            argv += ["-c", f"developer_instructions={toml_string(task.system)}"]
        if task.mcp is not None and task.tools:
            headers = ", ".join(f"{toml_string(name)} = {toml_string(HEADER_ENV.format(i))}"
                                for i, name in enumerate(task.mcp.headers))
            timeout = self.settings.tool_timeout_s + 30
            argv += ["-c", f"mcp_servers.{task.mcp.server_name}={{url = {toml_string(task.mcp.url)}, "
                     f"env_http_headers = {{{headers}}}, required = true, startup_timeout_sec = 60, "
                     f'tool_timeout_sec = {timeout:g}, default_tools_approval_mode = "approve"}}']
        kept = kept_from_agent(task)
        for name in sorted(kept):
            for flag in DENY_FLAGS.get(name, []):
                argv.append(flag)
        argv += ["exec", "--json", "--skip-git-repo-check", "-C", str(task.cwd), "-m", task.model]
        if not any(flag in part for part in self.argv for flag in SANDBOX_FLAGS):
            argv += ["--sandbox", "read-only" if "apply_patch" in kept else "workspace-write"]
        if resume:
            argv += ["resume", resume]
        return [*argv, "-"]

    def environment(self, task: ExecutorTask) -> dict[str, str]:
        env = dict(task.env)
        env["PWD"] = str(task.cwd)
        env["CODEX_HOME"] = str(self.codex_home)
        if task.mcp is not None:
            for i, value in enumerate(task.mcp.headers.values()):
                env[HEADER_ENV.format(i)] = value
        return env

    async def start(self, task: ExecutorTask) -> ExecutorRun:
        self.codex_home.mkdir(parents=True, exist_ok=True)
        baseline = last_token_count(rollout_file(self.codex_home, task.resume)) if task.resume else None
        run = CodexRun(self, task, usage_of((baseline or {}).get("total_token_usage")))
        run.process = await run.spawn(task.prompt, task.resume)
        return run


class CodexRun(OneShotRun):
    agent = "codex"

    def __init__(self, executor: CodexExecutor, task: ExecutorTask, baseline: Usage) -> None:
        super().__init__(task)
        self.executor = executor
        self.baseline = baseline
        """The thread's usage total before this step (Codex reports running totals)."""
        self.stream = CodexStream(task.mcp.server_name if task.mcp is not None else None, task.model)

    async def spawn(self, prompt: list[ContentBlock], resume: str | None) -> AgentProcess:
        process = AgentProcess(self.executor.command(self.task, resume), self.task.cwd,
                               self.executor.environment(self.task))
        self.stream.new_process()
        try:
            await start_with_prompt(process, prompt)
        except OSError as exc:
            raise ExecutorFailed("executor_unavailable", f"Codex did not start: {exc}") from None
        return process

    def feed(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        return self.stream.feed(line)

    def session(self) -> str | None:
        return self.stream.thread_id

    def stop_after(self, event: ExecutorEvent) -> Finished | None:
        """Codex keeps no turn limit: at `max_turns` with calls still to make, the step ends."""
        limit = self.task.max_turns
        if isinstance(event, AssistantMessage) and limit is not None and self.stream.turns >= max(1, limit) \
                and event.stop_reason == "tool_use":
            return dataclasses.replace(self.stream.finished(Usage()), stop_reason="max_turns")
        return None

    def ended(self, process: AgentProcess, finished: Finished | None) -> Finished:
        if finished is None:
            code = process.proc.returncode if process.proc is not None else None
            tail = " | ".join(list(process.stderr_tail)[-5:])
            raise ExecutorFailed("executor_failed", f"Codex ended without an answer (exit {code}): "
                                 f"{self.stream.error or tail or 'no message'}")
        return self._priced(finished)

    def _priced(self, finished: Finished) -> Finished:
        """The step's own usage (the thread's total less what it was before), its cost, and
        the context the last model call had."""
        info = last_token_count(rollout_file(self.executor.codex_home, self.stream.thread_id or "")) or {}
        total = finished.usage
        if not total.total_input() + total.output_tokens and info:  # stopped before `turn.completed`
            total = usage_of(info.get("total_token_usage"))
        usage = Usage(**{k: max(0, getattr(total, k) - getattr(self.baseline, k)) for k in Usage.model_fields})
        last = usage_of(info.get("last_token_usage"))
        return dataclasses.replace(finished, usage=usage, cost_usd=cost_usd(self.task.model, usage, price_table(self.executor.settings.prices)),
                                   context_tokens=last.total_input() + last.output_tokens)


