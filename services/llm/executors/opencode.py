"""opencode as an executor: one `opencode run --format json` process per step.

    opencode [operator's flags] run --format json -m PROVIDER/MODEL --title T
             [--session SES_ID]          (the prompt on stdin)
    OPENCODE_CONFIG_CONTENT={"mcp": {"loopwire": {"type": "remote", …}}, "permission": {…},
                             "instructions": [FILE], "agent": {"build": {"steps": N}}, …}

- `model.primary` is opencode's model, `provider/model` in its own spelling; the providers
  are the operator's opencode configuration (its global config, `OPENCODE_CONFIG`).
- The step's own settings are `OPENCODE_CONFIG_CONTENT`, which opencode merges over every
  other configuration (an operator's own `OPENCODE_CONFIG_CONTENT` is merged under it):
  the run's loopwire tools as a remote MCP server (its bearer header in that variable:
  the agent's environment, not its command line), the system text as an instructions
  file, `max_turns` as the build agent's `steps`, no sharing, no auto-update, no
  snapshots (opencode's undo history; loopwire does not use it).
- `deny` (and `approve`: `opencode run` answers every permission request itself, with a
  refusal that ends the run) is `permission: {name: "deny"}`, which takes the tool from
  the agent; opencode checks `write`, `patch` and `multiedit` as `edit`, so denying one
  of them denies `edit`.
- Its sessions live in its database: `OPENCODE_DB` when the operator sets it, else
  `opencode.db` in the agent's home under LOOPWIRE_EXECUTOR_DIR. A `message` on an idle
  session continues it (`--session`), so opencode keeps its history.
- A steer stops the running process and continues the session with the new message.
- `OPENCODE_DISABLE_AUTOUPDATE`, `OPENCODE_DISABLE_MODELS_FETCH` (its bundled model
  catalog is used), `OPENCODE_DISABLE_SHARE` and `OPENCODE_DISABLE_LSP_DOWNLOAD` are set
  unless the environment sets them: no traffic but the model provider's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any

from loopwire.shared.contract.messages import ContentBlock

from ..settings import LlmSettings
from .agent_process import AgentProcess
from .base import Executor, ExecutorEvent, ExecutorFailed, ExecutorRun, ExecutorTask, Finished
from .one_shot import OneShotRun, kept_from_agent, start_with_prompt
from .opencode_stream import OpencodeStream, mcp_tool_name
from .workdirs import agent_home

log = logging.getLogger("loopwire.llm.executors.opencode")

QUIET_ENV = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
             "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1"}
EDIT_TOOLS = ("write", "patch", "multiedit", "apply_patch")
"""Tools opencode's permissions check as `edit`."""
MCP_TIMEOUT_MS = 60_000
"""How long opencode waits for the MCP server's answers (its default, 5 s, is short for a
loaded machine)."""


def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into `base`, objects key by key (what opencode does with its layers)."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class OpencodeExecutor(Executor):
    profile = "opencode"

    def __init__(self, settings: LlmSettings, argv: list[str]) -> None:
        self.settings = settings
        self.argv = argv

    @property
    def database(self) -> Path:
        configured = os.environ.get("OPENCODE_DB")
        return Path(configured) if configured else agent_home(self.settings, "opencode") / "opencode.db"

    def session_reachable(self, agent_session: str, cwd: Path) -> bool:
        if not self.database.is_file():
            return False
        try:
            with contextlib.closing(sqlite3.connect(f"file:{self.database}?mode=ro", uri=True, timeout=5)) as db:
                return db.execute("select 1 from session where id = ?", (agent_session,)).fetchone() is not None
        except sqlite3.Error as exc:
            log.warning("opencode's database %s could not be read: %s", self.database, exc)
            return False

    def loopwire_tools(self, task: ExecutorTask) -> dict[str, str]:
        if task.mcp is None:
            return {}
        return {mcp_tool_name(task.mcp.server_name, t.name): t.name for t in task.tools}

    def config(self, task: ExecutorTask, instructions: Path | None) -> dict[str, Any]:
        config: dict[str, Any] = {"autoupdate": False, "share": "disabled", "snapshot": False}
        kept = kept_from_agent(task)
        if kept:
            config["permission"] = {name: "deny" for name in sorted(kept)}
            if kept & set(EDIT_TOOLS):
                config["permission"]["edit"] = "deny"
        if task.mcp is not None and task.tools:
            config["mcp"] = {task.mcp.server_name: {"type": "remote", "url": task.mcp.url,
                                                    "headers": dict(task.mcp.headers), "oauth": False,
                                                    "enabled": True, "timeout": MCP_TIMEOUT_MS}}
        if instructions is not None:
            config["instructions"] = [str(instructions)]
        if task.max_turns is not None:
            config["agent"] = {"build": {"steps": max(1, task.max_turns)}}
        return config

    def command(self, task: ExecutorTask, resume: str | None) -> list[str]:
        argv = [*self.argv, "run", "--format", "json", "-m", task.model, "--title", f"loopwire {task.session_id}"]
        if resume:
            argv += ["--session", resume]
        return argv

    def environment(self, task: ExecutorTask, instructions: Path | None) -> dict[str, str]:
        env = dict(task.env)
        env["PWD"] = str(task.cwd)  # opencode takes its directory from PWD, not from its cwd
        for key, value in QUIET_ENV.items():
            env.setdefault(key, value)
        env.setdefault("OPENCODE_DB", str(self.database))
        own: dict[str, Any] = {}
        with contextlib.suppress(ValueError, TypeError):
            parsed = json.loads(env.get("OPENCODE_CONFIG_CONTENT") or "{}")
            own = parsed if isinstance(parsed, dict) else {}
        env["OPENCODE_CONFIG_CONTENT"] = json.dumps(merge(own, self.config(task, instructions)))
        return env

    async def start(self, task: ExecutorTask) -> ExecutorRun:
        self.database.parent.mkdir(parents=True, exist_ok=True)
        run = OpencodeRun(self, task, _write_instructions(task))
        try:
            run.process = await run.spawn(task.prompt, task.resume)
        except BaseException:
            await run.cancel()
            raise
        return run


class OpencodeRun(OneShotRun):
    agent = "opencode"

    def __init__(self, executor: OpencodeExecutor, task: ExecutorTask, instructions: Path | None) -> None:
        super().__init__(task)
        self.executor = executor
        self.instructions = instructions
        self.stream = OpencodeStream(executor.loopwire_tools(task), task.model)

    async def spawn(self, prompt: list[ContentBlock], resume: str | None) -> AgentProcess:
        process = AgentProcess(self.executor.command(self.task, resume), self.task.cwd,
                               self.executor.environment(self.task, self.instructions))
        try:
            await start_with_prompt(process, prompt)
        except OSError as exc:
            raise ExecutorFailed("executor_unavailable", f"opencode did not start: {exc}") from None
        return process

    def feed(self, line: dict[str, Any]) -> list[ExecutorEvent]:
        return self.stream.feed(line)

    def session(self) -> str | None:
        return self.stream.session_id

    def ended(self, process: AgentProcess, finished: Finished | None) -> Finished:
        finished = self.stream.finished()
        if finished.is_error and self.stream.error is None:
            code = process.proc.returncode if process.proc is not None else None
            tail = " | ".join(list(process.stderr_tail)[-5:])
            raise ExecutorFailed("executor_failed", f"opencode ended without an answer (exit {code}): "
                                 f"{tail or 'no message'}")
        return finished

    async def cancel(self) -> None:
        await super().cancel()
        _remove(self.instructions)
        self.instructions = None


def _write_instructions(task: ExecutorTask) -> Path | None:
    """The step's system text as an instructions file of its own (removed at the end)."""
    if not task.system:
        return None
    path = task.scratch / f"opencode-{os.getpid()}-{task.step_id.replace(':', '_')}.md"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(task.system)
    return path


def _remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
