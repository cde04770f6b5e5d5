"""The README's quickstart as a newcomer runs it: `make run`'s command (read from the
Makefile) on ports where nothing answers, so it starts its own NATS and Redis from pip,
with no API key; then the README's first run of one's own in another process. Each prints
what the README shows, line for line, but for ids and ports."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopwire.testing.servers import free_port
from tests.paths import REPO

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent
IDS = [(re.compile(r"\b(demo|cli)-[0-9a-f]{8,}\b"), r"\1-<id>"), (re.compile(r"\brun [0-9a-f]{16}\b"), "run <id>"),
       (re.compile(r"127\.0\.0\.1:\d+"), "127.0.0.1:<port>")]


def normal(line: str) -> str:
    for pattern, repl in IDS:
        line = pattern.sub(repl, line)
    return line.rstrip()


def shown(marker: str) -> list[str]:
    """The lines of the README's text block after `<!-- quickstart:MARKER -->`."""
    text = (REPO / "README.md").read_text()
    block = re.search(rf"<!-- quickstart:{marker} -->\n```text\n(.*?)```", text, re.S)
    assert block, f"README has no quickstart block {marker}"
    return [normal(line) for line in block.group(1).splitlines() if line.strip()]


def in_order(expected: list[str], printed: str) -> None:
    lines = [normal(line) for line in printed.splitlines()]
    at = 0
    for want in expected:
        while at < len(lines) and lines[at] != want:
            at += 1
        assert at < len(lines), f"the README shows {want!r}; printed, in order:\n{printed}"
        at += 1


def make_run_command() -> list[str]:
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^run: install\n\t(.+)$", makefile, re.M)
    assert recipe, "the Makefile's run target"
    argv = shlex.split(recipe.group(1))
    assert argv[0] == "$(BIN)/loopwire", argv
    return [str(BIN / "loopwire"), *argv[1:]]


@pytest.mark.timeout(120)
def test_the_readme_quickstart_prints_what_the_readme_shows(tmp_path: Path) -> None:
    nats_url, redis_url = f"nats://127.0.0.1:{free_port()}", f"redis://127.0.0.1:{free_port()}/0"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWIRE_", "ANTHROPIC_"))}
    env.update({"LOOPWIRE_NATS_URL": nats_url, "LOOPWIRE_REDIS_URL": redis_url, "COLUMNS": "80",
                "LOOPWIRE_DATA_DIR": str(tmp_path / ".run"), "LOOPWIRE_METRICS_PORT": "0"})
    out_path = tmp_path / "make-run.txt"
    with out_path.open("w") as out:
        up = subprocess.Popen(make_run_command(), cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while "■ completed" not in out_path.read_text():
            assert up.poll() is None and time.monotonic() < deadline, out_path.read_text()
            time.sleep(0.2)
        in_order(shown("make-run"), out_path.read_text())

        first = shown("first-run")
        command = first[0].removeprefix("$ ")
        argv = shlex.split(command)
        assert argv[0] == ".venv/bin/loopwire", argv
        # stdout and stderr in one, as a terminal shows them
        run = subprocess.run([str(BIN / "loopwire"), *argv[1:]], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60, cwd=tmp_path)
        assert run.returncode == 0, run.stdout
        in_order(first[1:], run.stdout)
    finally:
        up.terminate()
        up.wait(30)
