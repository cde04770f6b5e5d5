"""shared/observability/http_server.py: /metrics, /healthz, /readyz over a real socket."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loopwire.shared.observability import metrics
from loopwire.shared.observability.http_server import Handle, start_http_server

pytestmark = pytest.mark.unit


async def request(handle: Handle, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", handle.port)
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(), 5)  # the server closes after one response
    writer.close()
    await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    return int(status_line.split(" ")[1]), headers, body


class Readiness:
    """A readiness callback whose answer the test sets."""

    def __init__(self) -> None:
        self.parts = {"nats": True, "redis": True}
        self.error: Exception | None = None
        self.hang = False

    async def __call__(self) -> dict[str, bool]:
        if self.hang:
            await asyncio.Event().wait()
        if self.error:
            raise self.error
        return dict(self.parts)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Handle, Readiness]]:
    ready = Readiness()
    handle = await start_http_server("127.0.0.1", 0, ready, ready_timeout_s=0.2)
    yield handle, ready
    await handle.close()


async def test_port_zero_picks_a_free_port(server: tuple[Handle, Readiness]) -> None:
    handle, _ = server
    assert handle.port > 0
    assert handle.url == f"http://127.0.0.1:{handle.port}"


async def test_metrics_endpoint_serves_the_exposition(server: tuple[Handle, Readiness]) -> None:
    handle, _ = server
    metrics.STEPS.labels(service="router", outcome="ok").inc()
    status, headers, body = await request(handle, "/metrics")
    assert status == 200
    assert headers["content-type"].startswith("text/plain; version=0.0.4")
    assert int(headers["content-length"]) == len(body)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    steps = [s for s in families["loopwire_steps"].samples if s.labels == {"service": "router", "outcome": "ok"}]
    assert steps and steps[0].value >= 1


async def test_healthz(server: tuple[Handle, Readiness]) -> None:
    handle, _ = server
    status, _, body = await request(handle, "/healthz")
    assert (status, orjson.loads(body)) == (200, {"status": "ok"})


async def test_readyz_reports_each_part(server: tuple[Handle, Readiness]) -> None:
    handle, ready = server
    status, _, body = await request(handle, "/readyz")
    assert (status, orjson.loads(body)) == (200, {"nats": "ok", "redis": "ok"})

    ready.parts["redis"] = False
    status, _, body = await request(handle, "/readyz")
    assert (status, orjson.loads(body)) == (503, {"nats": "ok", "redis": "fail"})


async def test_readyz_fails_when_the_check_raises_or_hangs(server: tuple[Handle, Readiness]) -> None:
    handle, ready = server
    ready.error = ConnectionError("redis down")
    status, _, body = await request(handle, "/readyz")
    assert status == 503 and orjson.loads(body) == {"error": "ConnectionError"}

    ready.error, ready.hang = None, True
    status, _, body = await request(handle, "/readyz")
    assert status == 503 and "timed out" in orjson.loads(body)["error"]


async def test_without_a_callback_ready_is_ok() -> None:
    handle = await start_http_server("127.0.0.1", 0)
    try:
        status, _, _ = await request(handle, "/readyz")
        assert status == 200
    finally:
        await handle.close()


async def test_other_paths_and_methods(server: tuple[Handle, Readiness]) -> None:
    handle, _ = server
    assert (await request(handle, "/nope"))[0] == 404
    status, headers, _ = await request(handle, "/metrics", "POST")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    status, headers, body = await request(handle, "/healthz", "HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0
    assert (await request(handle, "/metrics?x=1"))[0] == 200


async def test_garbage_and_oversized_requests_do_not_kill_the_server(server: tuple[Handle, Readiness]) -> None:
    handle, _ = server
    reader, writer = await asyncio.open_connection("127.0.0.1", handle.port)
    writer.write(b"NONSENSE\r\n\r\n")
    await writer.drain()
    assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 400")
    writer.close()

    reader, writer = await asyncio.open_connection("127.0.0.1", handle.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 40_000 + b"\r\n\r\n")
    await writer.drain()
    assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 431")
    writer.close()

    # a client that connects and goes away without a word
    _, writer = await asyncio.open_connection("127.0.0.1", handle.port)
    writer.close()
    await writer.wait_closed()

    assert (await request(handle, "/healthz"))[0] == 200


async def test_close_stops_listening() -> None:
    handle = await start_http_server("127.0.0.1", 0)
    await handle.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", handle.port)
