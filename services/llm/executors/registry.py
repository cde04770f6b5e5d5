"""Which executor answers a profile, and with which program.

The operator names the agents (the profile's command, or the ACP agent's entry in
LOOPWIRE_ACP_AGENTS); a run can only pick among them. Every way of not finding one is an
`ExecutorFailed` with a code the run's `error` event carries:

- `unsupported_profile`: no executor is built for this profile in this version;
- `unknown_agent`: `acp` without an agent, or one LOOPWIRE_ACP_AGENTS does not name;
- `executor_unavailable`: the command line is empty or its program is not found.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Callable

from ..settings import LlmSettings
from .base import Executor, ExecutorFailed

Builder = Callable[[LlmSettings, list[str]], Executor]

BUILDERS: dict[str, Builder] = {}
"""profile -> builder of its executor, given the settings and the agent's argv."""

COMMAND_SETTINGS = {"claude_code": "claude_code_cmd", "opencode": "opencode_cmd", "codex": "codex_cmd"}
"""The CLI profiles' command settings (LOOPWIRE_CLAUDE_CODE_CMD, ...)."""


def register(profile: str, builder: Builder) -> None:
    BUILDERS[profile] = builder


def _builtin() -> None:
    """The executors this version ships (imported late: each pulls in its own modules)."""
    if "claude_code" not in BUILDERS:
        from .claude_code import ClaudeCodeExecutor

        register("claude_code", ClaudeCodeExecutor)
    if "codex" not in BUILDERS:
        from .codex import CodexExecutor

        register("codex", CodexExecutor)
    if "opencode" not in BUILDERS:
        from .opencode import OpencodeExecutor

        register("opencode", OpencodeExecutor)
    if "acp" not in BUILDERS:
        from .acp_agent import AcpExecutor

        register("acp", AcpExecutor)


def command_line(profile: str, agent: str | None, settings: LlmSettings) -> tuple[str, list[str]]:
    """(the setting it came from, the argv) of the agent for `profile`."""
    if profile == "acp":
        agents = settings.acp_agents
        if not agent:
            raise ExecutorFailed("unknown_agent", "profile 'acp' needs StartRun \"executor\": {\"agent\": NAME}, "
                                 f"one of LOOPWIRE_ACP_AGENTS ({', '.join(sorted(agents)) or 'none configured'})")
        if agent not in agents:
            raise ExecutorFailed("unknown_agent", f"ACP agent {agent!r} is not one of LOOPWIRE_ACP_AGENTS "
                                 f"({', '.join(sorted(agents)) or 'none configured'})")
        return "LOOPWIRE_ACP_AGENTS", shlex.split(agents[agent])
    name = COMMAND_SETTINGS.get(profile)
    if name is None:
        raise ExecutorFailed("unsupported_profile", f"profile {profile!r} has no external executor")
    return f"LOOPWIRE_{name.upper()}", shlex.split(str(getattr(settings, name)))


def resolve_program(argv: list[str], setting: str) -> list[str]:
    """`argv` with its program found on PATH (or as a path), else `executor_unavailable`."""
    if not argv:
        raise ExecutorFailed("executor_unavailable", f"{setting} is empty: no agent program to run")
    found = shutil.which(argv[0])
    if found is None or not os.access(found, os.X_OK):
        raise ExecutorFailed("executor_unavailable",
                             f"the agent program {argv[0]!r} ({setting}) is not installed or not executable")
    return [found, *argv[1:]]


class Executors:
    """The executors of one llm process, built on first use and kept."""

    def __init__(self, settings: LlmSettings) -> None:
        self.settings = settings
        self._built: dict[tuple[str, str | None], Executor] = {}

    def get(self, profile: str, agent: str | None = None) -> Executor:
        key = (profile, agent if profile == "acp" else None)
        executor = self._built.get(key)
        if executor is not None:
            return executor
        _builtin()
        builder = BUILDERS.get(profile)
        if builder is None:
            raise ExecutorFailed("unsupported_profile", f"profile {profile!r} has no external executor in this "
                                 "version")
        setting, argv = command_line(profile, agent, self.settings)
        executor = self._built[key] = builder(self.settings, resolve_program(argv, setting))
        return executor
