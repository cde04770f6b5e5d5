"""The directories of the executors: the agents' homes, the sessions' own working
directories, and a private scratch directory per process.

All under LOOPWIRE_EXECUTOR_DIR (default: `loopwire-executor` in the temp directory):

    <dir>/agents/<profile>      an agent's state (Claude Code's CLAUDE_CONFIG_DIR: its
                                sessions, which `--resume` reads)
    <dir>/sessions/<sid>        the working directory of a session that names no workspace
    <dir>/scratch/<pid>         this process's files (MCP configurations), mode 0700

A session's directory is the same for every step of the session, in every replica that
shares the directory: agents key their sessions by their working directory.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..settings import LlmSettings


def root(settings: LlmSettings) -> Path:
    return Path(settings.executor_dir or Path(tempfile.gettempdir()) / "loopwire-executor")


def agent_home(settings: LlmSettings, profile: str) -> Path:
    return root(settings) / "agents" / profile


def session_dir(settings: LlmSettings, session_id: str) -> Path:
    """The session's own working directory, made when missing."""
    path = root(settings) / "sessions" / session_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def scratch_dir(settings: LlmSettings) -> Path:
    path = root(settings) / "scratch" / str(os.getpid())
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path
