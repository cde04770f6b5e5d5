"""What the fake model servers (fake_anthropic.py, fake_openai.py) share: an HTTP server
on a free port in a background thread, started and stopped the same way, usable as a
context manager (FakeServer), answering from scripts per model with failures to inject
and every request recorded (ScriptedServer). A subclass names its request handler class,
whose `fake` attribute is set to the server object, so a handler reaches the scripts and
the recorded requests."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Generic, Self, TypedDict, TypeVar

from loopwire.shared.contract.messages import ContentBlock


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024
    """The listen backlog: hundreds of model calls may connect at once (http.server's 5
    would drop their connections and leave them to TCP's retransmits)."""

class ResponseSpec(TypedDict, total=False):
    """A response as a suite scripts it or a responder returns it: what the fake answers
    (the keys each fake reads; others are kept and ignored)."""

    text: str
    chunks: list[str]
    content: list[ContentBlock]
    tool_use: list[dict[str, Any]]
    tool_calls: list[dict[str, Any]]
    usage: dict[str, int]
    model: str
    stop_reason: str
    error: dict[str, Any]
    error_after: int
    delay_s: float
    chunk_delay_s: float


class FakeServer:
    handler: ClassVar[type[BaseHTTPRequestHandler]]
    thread_name: ClassVar[str]

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        handler = type("Handler", (self.handler,), {"fake": self})
        self._httpd = _Server((self.host, self.port), handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), name=self.thread_name,
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float = field(default_factory=time.monotonic)


@dataclass
class Failure:
    status: int
    remaining: int | None
    """None: fail every matching request from now on."""
    model: str | None = None
    message: str | None = None

    def matches(self, model: str) -> bool:
        return (self.remaining is None or self.remaining > 0) and self.model in (None, "*", model)


F = TypeVar("F", bound=Failure)


class ScriptedServer(FakeServer, Generic[F]):
    """A fake server answering from scripts: responses queued per model, failures to
    inject, and every request recorded. Handler threads and the test share one lock,
    a condition that is notified on each recorded request."""

    responder: Any = None
    standing_responder: Any = None
    """The responder `reset()` puts back (a process's `--responder`); None: none."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.requests: list[RecordedRequest] = []
        self.lock = threading.Condition()
        self._scripts: dict[str, deque[ResponseSpec]] = {}
        self._failures: list[F] = []

    # -- steering (the test's side) ---------------------------------------------------------
    def script(self, model: str, responses: list[ResponseSpec]) -> None:
        """Queue responses for `model` (`"*"`: any model without a script of its own)."""
        with self.lock:
            self._scripts.setdefault(model, deque()).extend(responses)

    def reset(self) -> None:
        with self.lock:
            self._scripts.clear()
            self._failures.clear()
            self.requests.clear()
            self.responder = self.standing_responder

    def pending(self, model: str = "*") -> int:
        with self.lock:
            return len(self._scripts.get(model, ()))

    def _inject(self, failure: F) -> None:
        with self.lock:
            self._failures.append(failure)

    def _wait_for(self, paths: tuple[str, ...], n: int, timeout: float) -> list[RecordedRequest]:
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                hits = [r for r in self.requests if r.path in paths]
                if len(hits) >= n:
                    return hits
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(hits)} of {n} requests to {', '.join(paths)} after {timeout}s")
                self.lock.wait(left)

    # -- answering (called from handler threads) -------------------------------------------
    def record(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(RecordedRequest(path, headers, body))
            self.lock.notify_all()

    def take_failure(self, model: str) -> F | None:
        with self.lock:
            for failure in self._failures:
                if failure.matches(model):
                    if failure.remaining is not None:
                        failure.remaining -= 1
                    return failure
        return None

    def _scripted(self, model: str) -> ResponseSpec | None:
        """The next scripted response for `model`, else for `"*"`, else None."""
        with self.lock:
            for key in (model, "*"):
                queue = self._scripts.get(key)
                if queue:
                    return ResponseSpec(**queue.popleft())  # a copy: the caller may add to it
        return None
