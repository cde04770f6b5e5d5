"""The services read Redis's persistence settings at start and warn loudly when a restart
would lose state (shared/stores/redis_connection.py), against real redis-servers configured each way."""

from __future__ import annotations

import logging
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from loopwire.shared.stores.redis_connection import connect_redis, persistence_problem, warn_if_volatile
from loopwire.testing.servers import free_port, redis_server_binary, wait_port
from tests.paths import REPO

pytestmark = pytest.mark.integration


@pytest.fixture
def redis_with() -> Iterator[object]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> str:
        port = free_port()
        workdir = tempfile.mkdtemp(prefix="lw-redis-persist-")
        proc = subprocess.Popen([redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1",
                                 "--dir", workdir, "--daemonize", "no", *args],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(proc)
        wait_port(port, proc=proc)
        return f"redis://127.0.0.1:{port}/0"

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(("args", "expected"), [
    (("--appendonly", "yes", "--save", ""), None),
    (("--appendonly", "no", "--save", ""), "does not persist its data"),
    (("--appendonly", "no", "--save", "60", "1"), "snapshots only"),
    (("--appendonly", "no", "--save", "", "--rename-command", "CONFIG", ""), None),  # CONFIG disabled
])
async def test_persistence_is_read_and_a_volatile_redis_is_named(
        redis_with, args: tuple[str, ...], expected: str | None, caplog: pytest.LogCaptureFixture) -> None:
    client = connect_redis(redis_with(*args))
    try:
        problem = await persistence_problem(client)
        if expected is None:
            assert problem is None
        else:
            assert problem is not None and expected in problem
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="loopwire.redis"):
            await warn_if_volatile(client)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert bool(warnings) == (expected is not None)
        if warnings:
            assert "append-only file" in warnings[0]
    finally:
        await client.aclose()


async def test_the_test_servers_and_the_embedded_redis_persist(redis_server) -> None:  # type: ignore[no-untyped-def]
    client = connect_redis(redis_server.url)
    try:
        assert await persistence_problem(client) is None, "start_redis runs with an append-only file"
    finally:
        await client.aclose()


def test_the_embedded_redis_runs_with_an_append_only_file() -> None:
    embedded = REPO / "loopwire" / "embedded.py"
    assert '"--appendonly", "yes"' in embedded.read_text()
