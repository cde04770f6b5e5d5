"""A tiny HTTP server for /metrics, /healthz and /readyz (asyncio streams, no dependencies).

Usage::

    from loopwire.shared.observability.http_server import start_http_server

    async def ready() -> dict[str, bool]:
        return {"nats": nc.is_connected, "redis": await redis_ping()}

    handle = await start_http_server("0.0.0.0", settings.metrics_port, ready)
    ...
    await handle.close()

Routes (GET or HEAD; anything else gets 404 / 405):

- ``/metrics``: the Prometheus text exposition of :data:`loopwire.shared.observability.metrics.REGISTRY`.
- ``/healthz``: 200 ``{"status":"ok"}`` while the process runs (liveness).
- ``/readyz``: awaits `ready()` (bounded by `ready_timeout_s`); 200 with
  ``{"nats":"ok","redis":"ok"}`` when every part is true, else 503 with the failing parts
  marked ``"fail"``; a callback that raises or times out answers 503 too (readiness).

Port 0 picks a free port: read it from ``handle.port``. One request per connection
(``Connection: close``): Prometheus and kubelet probes need nothing more.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus

import orjson

from loopwire.shared.observability import metrics

__all__ = ["Handle", "log", "start_http_server"]

log = logging.getLogger("loopwire.http")

ReadyCallback = Callable[[], Awaitable[dict[str, bool]]]

_MAX_HEADER_BYTES = 16 * 1024
_READ_TIMEOUT_S = 10.0


@dataclass
class Handle:
    """A running server: where it listens and how to stop it."""

    host: str
    port: int
    _server: asyncio.Server

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"http://{host}:{self.port}"

    async def close(self) -> None:
        self._server.close()
        await self._server.wait_closed()


async def start_http_server(host: str, port: int, ready: ReadyCallback | None = None,
                            *, ready_timeout_s: float = 2.0) -> Handle:
    """Listen on `host`:`port` (0 = a free port) and serve until ``handle.close()``."""

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _serve_one(reader, writer, ready, ready_timeout_s=ready_timeout_s)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or was too slow: nothing to answer
        except Exception:
            log.exception("http handler failed")
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionError, OSError):
                pass

    server = await asyncio.start_server(on_connection, host, port, reuse_address=True,
                                        limit=_MAX_HEADER_BYTES)
    bound_port = server.sockets[0].getsockname()[1]
    log.info("http server on %s:%d (/metrics /healthz /readyz)", host, bound_port)
    return Handle(host=host, port=bound_port, _server=server)


async def _serve_one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     ready: ReadyCallback | None, *, ready_timeout_s: float) -> None:
    try:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), _READ_TIMEOUT_S)
    except asyncio.LimitOverrunError:
        await _respond(writer, HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"", content_type="text/plain")
        return
    request_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = request_line.split(" ")
    if len(parts) != 3:
        await _respond(writer, HTTPStatus.BAD_REQUEST, b"bad request\n", content_type="text/plain")
        return
    method, target, _version = parts
    path = target.split("?", 1)[0]
    if path not in ("/metrics", "/healthz", "/readyz"):
        await _respond(writer, HTTPStatus.NOT_FOUND, b"not found\n", content_type="text/plain")
        return
    if method not in ("GET", "HEAD"):
        await _respond(writer, HTTPStatus.METHOD_NOT_ALLOWED, b"method not allowed\n", content_type="text/plain",
                       extra={"Allow": "GET, HEAD"})
        return
    head_only = method == "HEAD"

    if path == "/metrics":
        # Generating the exposition is synchronous and takes well under a millisecond for
        # our few hundred series; not worth a thread hop.
        await _respond(writer, HTTPStatus.OK, metrics.metrics_text(), content_type=metrics.CONTENT_TYPE, head_only=head_only)
    elif path == "/healthz":
        await _respond(writer, HTTPStatus.OK, b'{"status":"ok"}', content_type="application/json", head_only=head_only)
    else:
        status, body = await _readiness(ready, ready_timeout_s)
        await _respond(writer, status, orjson.dumps(body), content_type="application/json", head_only=head_only)


async def _readiness(ready: ReadyCallback | None, timeout_s: float) -> tuple[HTTPStatus, dict[str, str]]:
    if ready is None:
        return HTTPStatus.OK, {}
    try:
        parts = await asyncio.wait_for(ready(), timeout_s)
    except TimeoutError:
        return HTTPStatus.SERVICE_UNAVAILABLE, {"error": f"readiness check timed out after {timeout_s}s"}
    except Exception as exc:
        log.warning("readiness check failed: %s", exc)
        return HTTPStatus.SERVICE_UNAVAILABLE, {"error": type(exc).__name__}
    body = {name: "ok" if ok else "fail" for name, ok in parts.items()}
    status = HTTPStatus.OK if all(parts.values()) else HTTPStatus.SERVICE_UNAVAILABLE
    return status, body


async def _respond(writer: asyncio.StreamWriter, status: HTTPStatus, body: bytes, *, content_type: str,
                   head_only: bool = False, extra: dict[str, str] | None = None) -> None:
    headers = {
        "Content-Type": content_type,
        "Content-Length": str(len(body)),
        "Cache-Control": "no-store",
        "Connection": "close",
        **(extra or {}),
    }
    lines = [f"HTTP/1.1 {status.value} {status.phrase}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if not head_only:
        writer.write(body)
    await writer.drain()
