"""The HTTP side of the fake Messages API (fake_anthropic.py): its routes, the `/_fake/`
controls and the SSE stream, on http.server."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any, cast

from loopwire.shared.contract.messages import MessagesRequest

from .message_rules import history_problem

if TYPE_CHECKING:
    from .fake_anthropic import FakeAnthropic


class MessagesApiHandler(BaseHTTPRequestHandler):
    """One connection to the fake: the Messages API routes, the `/_fake/` controls, SSE."""

    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection ends its thread after this
    # A stream is many small writes: with Nagle's algorithm each waits for the client's
    # delayed ACK of the one before (40 ms on Linux), which no real provider adds.
    disable_nagle_algorithm = True
    fake: FakeAnthropic

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet in tests
        pass

    # -- plumbing ---------------------------------------------------------------------------
    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            value = json.loads(raw or b"{}")
        except ValueError:
            return {"_invalid_json": raw.decode("utf-8", "replace")}
        return value if isinstance(value, dict) else {"_body": value}

    def _send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", f"req_fake_{id(body):x}")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    # -- routes -----------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path.startswith("/_fake/requests"):
            with self.fake.lock:
                data = [{"path": r.path, "body": r.body} for r in self.fake.requests]
            self._send_json(200, {"requests": data})
        elif self.path.startswith("/_fake/stats"):
            fake = self.fake
            with fake.lock:
                messages = [r for r in fake.requests if r.path == "/v1/messages"]
                stats = {"max_in_flight": fake.max_in_flight, "in_flight": fake.in_flight,
                         "arrivals": [r.at for r in messages], "with_tools": [bool(r.body.get("tools")) for r in messages],
                         "n_messages": [len(r.body.get("messages") or []) for r in messages],
                         "usages": list(fake.usages), "served_s": list(fake.served_s)}
            self._send_json(200, {**stats, "rate_limited": [at for _, at in fake.rate_limited]})
        elif self.path.startswith("/_fake/health"):
            self._send_json(200, {"ok": True})
        else:
            self._send_json(404, self.fake.error_body(404))

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        body = self._read_json()
        try:
            if path == "/v1/messages":
                self.fake.record(path, dict(self.headers.items()), body)
                self.fake.entered()
                began = time.monotonic()
                try:
                    self._messages(cast(MessagesRequest, body))  # its required keys checked there
                finally:
                    self.fake.left(time.monotonic() - began)
            elif path == "/v1/messages/count_tokens":
                self.fake.record(path, dict(self.headers.items()), body)
                self._send_json(200, {"input_tokens": self.fake.count_tokens(cast(MessagesRequest, body))})
            elif path.startswith("/_fake/"):
                self._control(path, body)
            else:
                self._send_json(404, self.fake.error_body(404))
        except (BrokenPipeError, ConnectionResetError):  # the client went away mid-answer
            self.close_connection = True

    def _control(self, path: str, body: dict[str, Any]) -> None:
        fake = self.fake
        if path == "/_fake/script":
            fake.script(body.get("model") or "*", list(body.get("responses") or []))
        elif path == "/_fake/fail_next":
            fake.fail_next(int(body.get("status", 529)), body.get("n", 1), body.get("model"),
                           message=body.get("message"), error_type=body.get("type"), retry_after=body.get("retry_after"),
                           mid_stream=bool(body.get("mid_stream", False)))
        elif path == "/_fake/enforce":
            fake.enforce(body.get("model") or "*", rpm=body.get("rpm"), max_in_flight=body.get("max_in_flight"),
                         window_s=float(body.get("window_s", 60.0)), retry_after=float(body.get("retry_after", 1.0)))
        elif path == "/_fake/latency":
            fake.latency(body.get("model") or "*", first_token_s=float(body.get("first_token_s", 1.0)),
                         total_s=float(body.get("total_s", 5.0)), chunks=int(body.get("chunks", 4)))
        elif path == "/_fake/reset":
            fake.reset()
        else:
            self._send_json(404, self.fake.error_body(404))
            return
        self._send_json(200, {"ok": True})

    def _messages(self, body: MessagesRequest) -> None:
        fake = self.fake
        model = str(body.get("model", ""))
        if not body.get("messages") or not body.get("max_tokens") or not model:
            self._send_json(400, self.fake.error_body(400, {"message": "model, messages and max_tokens are required"}))
            return
        problem = history_problem(body["messages"]) if isinstance(body["messages"], list) \
            else "messages: Input should be a valid list"
        if problem is not None:  # as the real API refuses it (message_rules.py)
            fake.refuse(problem, body)
            self._send_json(400, self.fake.error_body(400, {"message": problem}))
            return
        stream = bool(body.get("stream"))
        retry_after = fake.provider_limits.refusal(model, fake.in_flight)
        if retry_after is not None:  # the provider's own limit (fake_provider_limits.py)
            self._send_json(429, fake.error_body(429), {"retry-after": f"{retry_after:g}", "x-should-retry": "true"})
            return
        failure = fake.take_failure(model)
        if failure is not None and not (failure.mid_stream and stream):
            headers = {"retry-after": str(failure.retry_after)} if failure.retry_after is not None else {}
            headers["x-should-retry"] = "true" if failure.status in (408, 409, 429) or failure.status >= 500 else "false"
            self._send_json(failure.status, self.fake.error_body(
                failure.status, {"type": failure.error_type, "message": failure.message}), headers)
            return
        spec = fake.provider_limits.paced(model, fake.take_response(body))
        if failure is not None:  # a mid-stream failure: a normal start, then an error event
            spec.setdefault("text", "This answer will break off")
            spec["error"] = {"status": failure.status, "type": failure.error_type, "message": failure.message}
            spec["error_after"] = 1
        if spec.get("delay_s"):
            time.sleep(float(spec["delay_s"]))
        error = spec.get("error")
        if error and spec.get("error_after") is None:
            status = int(error.get("status", 529))
            self._send_json(status, self.fake.error_body(status, error))
            return
        message = fake.build_message(body, spec)
        if not stream:
            self._send_json(200, message)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("request-id", f"req_{message['id']}")
        self.end_headers()
        chunk_delay = float(spec.get("chunk_delay_s") or 0)
        for event, data in fake.stream_events(message, spec):
            if chunk_delay and event == "content_block_delta":
                time.sleep(chunk_delay)
            self._chunk(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
        self._chunk(b"")
