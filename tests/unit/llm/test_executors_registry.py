"""Which executor answers a profile: the operator's commands, refusals with clear codes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loopwire.llm.executors import registry
from loopwire.llm.executors.base import Executor, ExecutorFailed, ExecutorRun, ExecutorTask
from loopwire.settings import Settings

pytestmark = pytest.mark.unit


class _Recording(Executor):
    def __init__(self, settings: Settings, argv: list[str]) -> None:
        self.argv = argv

    async def start(self, task: ExecutorTask) -> ExecutorRun:
        raise AssertionError("not started in these tests")


def _failure(fn: object, *args: object) -> ExecutorFailed:
    with pytest.raises(ExecutorFailed) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


def test_cli_profiles_take_their_command_settings() -> None:
    s = Settings(claude_code_cmd="/opt/bin/claude --debug", codex_cmd="codex", opencode_cmd="oc run")
    assert registry.command_line("claude_code", None, s) == ("LOOPWIRE_CLAUDE_CODE_CMD", ["/opt/bin/claude", "--debug"])
    assert registry.command_line("opencode", None, s) == ("LOOPWIRE_OPENCODE_CMD", ["oc", "run"])
    assert registry.command_line("codex", "ignored", s)[1] == ["codex"]


def test_acp_agents_are_the_operators_list_only() -> None:
    s = Settings(acp_agents={"claude": "claude-code-acp --x"})
    assert registry.command_line("acp", "claude", s) == ("LOOPWIRE_ACP_AGENTS", ["claude-code-acp", "--x"])
    unknown = _failure(registry.command_line, "acp", "rm -rf /", s)
    assert unknown.code == "unknown_agent" and "claude" in unknown.message
    missing = _failure(registry.command_line, "acp", None, s)
    assert missing.code == "unknown_agent" and '"executor"' in missing.message
    none = _failure(registry.command_line, "acp", "claude", Settings())
    assert none.code == "unknown_agent" and "none configured" in none.message


def test_acp_agents_setting_reads_json_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWIRE_ACP_AGENTS", '{"zed": "claude-code-acp"}')
    assert Settings().acp_agents == {"zed": "claude-code-acp"}


def test_a_missing_program_is_executor_unavailable(tmp_path: Path) -> None:
    gone = _failure(registry.resolve_program, [str(tmp_path / "no-such-agent")], "LOOPWIRE_CLAUDE_CODE_CMD")
    assert gone.code == "executor_unavailable" and "LOOPWIRE_CLAUDE_CODE_CMD" in gone.message
    assert _failure(registry.resolve_program, [], "LOOPWIRE_CODEX_CMD").code == "executor_unavailable"
    assert registry.resolve_program([sys.executable, "-V"], "X") == [sys.executable, "-V"]


def test_executors_are_built_once_per_profile_and_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.BUILDERS, "codex", _Recording)
    monkeypatch.setitem(registry.BUILDERS, "acp", _Recording)
    s = Settings(codex_cmd=f"{sys.executable} -m codex", acp_agents={"a": sys.executable, "b": f"{sys.executable} -b"})
    executors = registry.Executors(s)
    first = executors.get("codex")
    assert isinstance(first, _Recording) and first.argv == [sys.executable, "-m", "codex"]
    assert executors.get("codex") is first
    a, b = executors.get("acp", "a"), executors.get("acp", "b")
    assert isinstance(b, _Recording) and a is not b and b.argv[-1] == "-b"


def test_a_profile_without_an_executor_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(registry.BUILDERS, "opencode", raising=False)
    monkeypatch.setattr(registry, "_builtin", lambda: None)
    assert _failure(registry.Executors(Settings()).get, "opencode").code == "unsupported_profile"
    assert _failure(registry.command_line, "agentic", None, Settings()).code == "unsupported_profile"
