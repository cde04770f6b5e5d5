"""The coding agents the executor tests drive, installed by `make agents` from
deploy/agents/package-lock.json into deploy/agents/node_modules/.bin.

A test that needs one is marked `needs_agent(binary, name)` (`needs`). Where the agent is
missing it skips on a developer's machine and fails under CI (`CI` set), as the promtool
tests do: a machine without npm must not pass the executor tests by skipping them
(tests/conftest.py, `pytest_runtest_setup`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.paths import REPO

AGENTS_BIN = REPO / "deploy" / "agents" / "node_modules" / ".bin"
CLAUDE = AGENTS_BIN / "claude"
CODEX = AGENTS_BIN / "codex"
OPENCODE = AGENTS_BIN / "opencode"
ACP_AGENT = AGENTS_BIN / "claude-code-acp"


def needs(binary: Path, name: str) -> pytest.MarkDecorator:
    return pytest.mark.needs_agent(binary=binary, name=name)


def check_installed(item: pytest.Item) -> None:
    """Skip (or, under CI, fail) a test whose `needs_agent` binary is not installed."""
    for mark in item.iter_markers("needs_agent"):
        binary: Path = mark.kwargs["binary"]
        if binary.exists():
            continue
        message = f"{mark.kwargs['name']} is not installed ({binary.relative_to(REPO)}): `make agents` (needs npm)"
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
