"""What the fake model servers (fake_anthropic.py, fake_openai.py) share: an HTTP server
on a free port in a background thread, started and stopped the same way, usable as a
context manager. A subclass names its request handler class, whose `fake` attribute is
set to the server object, so a handler reaches the scripts and the recorded requests."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar, Self


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
        self._httpd = ThreadingHTTPServer((self.host, self.port), handler)
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
