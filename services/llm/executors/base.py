"""External executors: a coding agent's own loop answers a generation step.

In the profiles `claude_code`, `opencode`, `codex` and `acp` the llm service does not call
a model itself: it hands the step to an external coding agent (Claude Code, opencode,
Codex, any ACP agent) and reports what the agent does as loopwire events. This module is
the one interface every agent sits behind.

How an implementation plugs in:

1. Subclass `Executor` and implement `start(task)`, returning an `ExecutorRun` (usually
   a subclass that owns the agent's process). `ExecutorRun.events()` yields the
   `ExecutorEvent`s below, in the order the agent produced them, and ends with exactly
   one `Finished` (or raises `ExecutorFailed`, which the caller turns into an `error`
   event and a failed step).
2. Add a builder to `BUILDERS` in registry.py under the profile's name; it receives the
   settings and the command line (`LOOPWIRE_CLAUDE_CODE_CMD`, `LOOPWIRE_OPENCODE_CMD`,
   `LOOPWIRE_CODEX_CMD`, or the agent's entry of `LOOPWIRE_ACP_AGENTS`), already split and
   checked to name an existing program.
3. Nothing else: the caller (runner.py) maps the events to `text.delta`, `message`,
   `tool.call` / `tool.result` (`"source": "executor"`), `plan.updated`,
   `approval.requested`, `compaction`, and the step's result (usage, cost, turns).

Lifecycle of one step (the caller's side):

- `start(task)`: the agent starts in `task.cwd` with `task.prompt` as its new user input,
  continuing its own session `task.resume` when one is given;
- `events()`: consumed to the end; a `PermissionRequest` is answered with
  `run.respond(request, allow, message)` (the agent waits meanwhile);
- `steer(content)`: a new user message reaches the running agent;
- `cancel()`: the agent's process and all its children stop (abort, steer by restart,
  budget, max_turns, a timeout); `events()` then ends without a `Finished`;
- `aclose()`: always called at the end, releases whatever is left (idempotent).

`Executor.session_reachable(agent_session, cwd)` tells whether the agent's own session
files are on this machine, so a step redelivered after a crash can resume the agent's
session instead of starting the turn again.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loopwire.shared.contract.envelopes import ToolSpec, Usage
from loopwire.shared.contract.messages import ContentBlock, Message


# -- what one step asks of an agent -------------------------------------------------------
@dataclass(frozen=True)
class McpEndpoint:
    """Where the agent reaches the run's loopwire tools (served by the llm service over
    MCP's streamable HTTP, mcp_bridge.py)."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    server_name: str = "loopwire"
    """The MCP server's name as the agent sees it: Claude Code calls tool `t` of it
    `mcp__loopwire__t`."""


@dataclass(frozen=True)
class ExecutorTask:
    """One generation step handed to an agent."""

    session_id: str
    run_id: str
    step_id: str
    turn: int
    profile: str
    """`claude_code`, `opencode`, `codex` or `acp`."""
    model: str
    """`model.primary` of the run, handed to the agent as its model."""
    prompt: list[ContentBlock]
    """The new user input, as content blocks: what arrived since the agent's last answer
    (the start's input, a follow-up, a steer, a nudge); for a restarted turn without the
    agent's session files, the conversation so far rendered as text first."""
    cwd: Path
    """The agent's working directory: the run's workspace or the session's own directory."""
    agent: str | None = None
    """`acp`: the agent's name, a key of LOOPWIRE_ACP_AGENTS."""
    system: str | None = None
    """Appended to the agent's own system prompt (the run's system prompt and this step's
    system reminders: progress injection, the budget's last-answer note)."""
    resume: str | None = None
    """The agent's own session id to continue (its history), or None for a new session."""
    new_session: str | None = None
    """The id a new session gets, for agents that take one from the caller (a UUID):
    known before the agent writes anything, so a crash right after the start still
    knows which session to resume."""
    scratch: Path = field(default_factory=lambda: Path("."))
    """A private directory (mode 0700) for the executor's own files of this step."""
    permissions: dict[str, str] = field(default_factory=dict)
    """Tool name -> `auto` / `approve` / `deny`, the operator's floor already applied. The
    names are the agent's own tools (`Bash`, `Write`) and loopwire's tools (`add`); a name
    not listed is `auto`."""
    tools: list[ToolSpec] = field(default_factory=list)
    """The run's loopwire tools, offered to the agent over `mcp` (empty: none)."""
    mcp: McpEndpoint | None = None
    max_turns: int | None = None
    """The agent's model turns left in the run (None: no limit)."""
    max_cost_usd: float | None = None
    """Dollars left in the run's budget, for agents that stop themselves at one."""
    compact_first: bool = False
    """The context the agent reported last is past the run's compaction threshold: the
    agent compacts its own context before taking the prompt (ContextGuard)."""
    env: dict[str, str] = field(default_factory=dict)
    """The agent's environment (the caller builds it: no loopwire secrets in it)."""


# -- what an agent reports ----------------------------------------------------------------
@dataclass(frozen=True)
class ExecutorEvent:
    """Base of everything `ExecutorRun.events()` yields."""


@dataclass(frozen=True)
class SessionStarted(ExecutorEvent):
    """The agent's own session id (first thing most agents report): the next step
    continues it."""

    agent_session: str


@dataclass(frozen=True)
class TextDelta(ExecutorEvent):
    text: str


@dataclass(frozen=True)
class AssistantMessage(ExecutorEvent):
    """One finished assistant turn of the agent (one model call), in the Messages format.
    `usage` is that call's, when the agent reports it per turn."""

    message: Message
    model: str | None = None
    usage: Usage | None = None
    stop_reason: str | None = None


@dataclass(frozen=True)
class ToolCall(ExecutorEvent):
    """The agent calls one of its own tools (or a loopwire tool over MCP: `loopwire_tool`
    names it, and the tools service reports that call itself)."""

    tool_use_id: str
    name: str
    input: dict[str, Any]
    loopwire_tool: str | None = None


@dataclass(frozen=True)
class ToolResult(ExecutorEvent):
    tool_use_id: str
    name: str
    content: str | list[ContentBlock]
    is_error: bool = False
    loopwire_tool: str | None = None


@dataclass(frozen=True)
class PlanUpdated(ExecutorEvent):
    """The agent's plan (ACP `plan`): entries `{"content", "status", "priority"?}`."""

    entries: list[dict[str, Any]]


@dataclass(frozen=True)
class PermissionRequest(ExecutorEvent):
    """The agent asks before running a tool. Answer with `ExecutorRun.respond`; the agent
    waits until then. `name` is the tool's name as loopwire's permissions know it
    (`Bash`, or the loopwire tool's own name for one reached over MCP)."""

    request_id: str
    tool_use_id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Compacted(ExecutorEvent):
    """The agent compacted its own context (asked to, or on its own)."""

    tokens_before: int
    tokens_after: int | None = None
    trigger: str = "auto"


@dataclass(frozen=True)
class Finished(ExecutorEvent):
    """The agent ended its turn: its final answer and what the whole step cost."""

    text: str
    usage: Usage
    cost_usd: float | None
    """As the agent reports it for this step; None when it reports none."""
    turns: int
    """The agent's model calls in this step (0 for a turn that made none: a `/compact`)."""
    stop_reason: str = "end_turn"
    """`end_turn`, or `max_turns` when the agent stopped at `task.max_turns`."""
    agent_session: str | None = None
    context_tokens: int = 0
    """The size of the agent's context after its last call (input + output of that
    call), what ContextGuard compares with the run's threshold."""
    is_error: bool = False
    error: str | None = None


class ExecutorFailed(Exception):
    """The agent could not answer: unknown agent, missing program, the agent's own error.
    `code` becomes the `error` event's code; `retryable` tells the router whether the
    same step may succeed on another try."""

    def __init__(self, code: str, message: str, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.retryable = retryable


# -- the interface --------------------------------------------------------------------------
class ExecutorRun(ABC):
    """One running agent step. Not reused across steps."""

    @abstractmethod
    def events(self) -> AsyncIterator[ExecutorEvent]:
        """What the agent does, in order, ending with one `Finished`."""

    @abstractmethod
    async def respond(self, request: PermissionRequest, allow: bool, message: str | None = None) -> None:
        """Answer a permission request: allow the tool call, or refuse it with `message`."""

    @abstractmethod
    async def steer(self, content: list[ContentBlock]) -> None:
        """A new user message into the running agent."""

    @abstractmethod
    async def cancel(self) -> None:
        """Stop the agent's process and every process it started."""

    async def aclose(self) -> None:
        """Release what is left; the default cancels."""
        await self.cancel()


class Executor(ABC):
    """One agent family (a CLI, an ACP agent). Built once per llm process by registry.py."""

    profile: str = ""
    compacts_itself: bool = False
    """The agent has a compaction command loopwire can send it (`compact_first`: Claude
    Code's `/compact`). Without one, ContextGuard's compaction starts a fresh agent
    session seeded with a trimmed transcript of the conversation (runner.py)."""

    @abstractmethod
    async def start(self, task: ExecutorTask) -> ExecutorRun:
        """Start the agent on `task`. Raises `ExecutorFailed` when it cannot start."""

    def session_reachable(self, agent_session: str, cwd: Path) -> bool:
        """Whether `agent_session`'s files are on this machine (it can be resumed here).
        The default: an agent keeps no files loopwire knows of."""
        return False
