"""`pip install loopwire` is enough to run `loopwire up`: the wheel built from this tree,
installed WITHOUT extras into a fresh venv, starts the five services against the test
servers and runs a session (offline scripted model and the demo calculator tool) to its
end. A module that imports a package only declared in an extra (pyyaml once was only in
`[dev]`) fails here, not on a user's machine.

The wheel's dependencies come from the configured package index through pip's cache, so
after the first run the install takes seconds."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from loopwire.testing.servers import ServerHandle, free_port

from .events import SessionEvents
from .wheel import build_wheel, fresh_venv

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only the wheel and its declared runtime dependencies; its bin."""
    root = tmp_path_factory.mktemp("wheel")
    return fresh_venv(root, build_wheel(root))


@contextlib.contextmanager
def loopwire_up(bin_dir: Path, cwd: Path, nats_url: str, redis_url: str, prefix: str) -> Iterator[int]:
    """`loopwire up` from the fresh venv, run from an empty directory (nothing of the
    source tree on its path); yields the metrics port once /readyz answers 200."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWIRE_", "ANTHROPIC_", "PYTHON"))}
    env.update({
        "LOOPWIRE_NATS_URL": nats_url, "LOOPWIRE_REDIS_URL": redis_url, "LOOPWIRE_SUBJECT_PREFIX": prefix,
        "LOOPWIRE_METRICS_PORT": str(port), "LOOPWIRE_METRICS_HOST": "127.0.0.1",
        "LOOPWIRE_LLM_PROVIDER": "scripted", "LOOPWIRE_TOOL_MODULES": "loopwire.demo.tools",
        "LOOPWIRE_DISCOVERY_INTERVAL_S": "0.5", "LOOPWIRE_ACK_WAIT_S": "3",
    })
    log_path = cwd / "loopwire.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([str(bin_dir / "loopwire"), "up"], cwd=cwd, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"loopwire up exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}")
            with contextlib.suppress(OSError), urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                if resp.status == 200:
                    break
            assert time.monotonic() < deadline, f"not ready after 60 s:\n{log_path.read_text()[-4000:]}"
            time.sleep(0.1)
        yield port
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.mark.timeout(600)  # the first run fills pip's cache; later ones take ~30-60 s
async def test_wheel_without_extras_runs_loopwire_up(installed: Path, nats_server: ServerHandle,
                                                      redis_server: ServerHandle, tmp_path: Path) -> None:
    prefix = f"lww{uuid.uuid4().hex[:8]}"
    with loopwire_up(installed, tmp_path, nats_server.url, redis_server.url, prefix):
        nc = await nats.connect(nats_server.url)
        try:
            sid = f"wheel-{uuid.uuid4().hex[:8]}"
            async with SessionEvents(nc, sid, prefix=prefix) as ev:
                await ev.publish("start", {"v": 1, "input": "What is 6 * 7?"})
                ended = await ev.wait_for("run.ended", timeout=30)
            results = ev.of("tool.result")
        finally:
            await nc.drain()
    assert ended["status"] == "completed", json.dumps(ev.events)[-3000:]
    assert [r["name"] for r in results] == ["calculator"] and "42" in json.dumps(results[0]["content"])
    assert "42" in ended["final_text"]
