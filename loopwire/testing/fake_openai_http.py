"""The HTTP side of the fake OpenAI API (fake_openai.py): its routes, the `/_fake/` controls
and the SSE streams, on http.server."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from .fake_openai_wire import chat_chunks, chat_completion, error_body, response_object, responses_events

if TYPE_CHECKING:
    from .fake_openai import FakeOpenAI

RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"


class OpenAIApiHandler(BaseHTTPRequestHandler):
    """One connection to the fake: the two model APIs, `/v1/models`, the `/_fake/` controls."""

    protocol_version = "HTTP/1.1"
    timeout = 30  # an idle keep-alive connection ends its thread after this
    fake: FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet in tests
        pass

    def _read_json(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            value = json.loads(raw or b"{}")
        except ValueError:
            return {"_invalid_json": raw.decode("utf-8", "replace")}
        return value if isinstance(value, dict) else {"_body": value}

    def _send_json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if path == "/_fake/requests":
            with self.fake.lock:
                data = [{"path": r.path, "body": r.body} for r in self.fake.requests]
            self._send_json(200, {"requests": data})
        elif path == "/_fake/health":
            self._send_json(200, {"ok": True})
        elif path == "/v1/models":
            with self.fake.lock:
                names = sorted(m for m in self.fake._scripts if m != "*")
            self._send_json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in names]})
        else:
            self._send_json(404, error_body(404, "not found"))

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        body = self._read_json()
        try:
            if path in (RESPONSES, CHAT):
                self.fake.record(path, dict(self.headers.items()), body)
                self._model_call(path, body)
            elif path.startswith("/_fake/"):
                self._control(path, body)
            else:
                self._send_json(404, error_body(404, "not found"))
        except (BrokenPipeError, ConnectionResetError):  # the client went away mid-answer
            self.close_connection = True

    def _control(self, path: str, body: dict[str, Any]) -> None:
        fake = self.fake
        if path == "/_fake/script":
            fake.script(body.get("model") or "*", list(body.get("responses") or []))
        elif path == "/_fake/fail_next":
            fake.fail_next(int(body.get("status", 500)), body.get("n", 1), body.get("model"), message=body.get("message"))
        elif path == "/_fake/reset":
            fake.reset()
        else:
            self._send_json(404, error_body(404, "not found"))
            return
        self._send_json(200, {"ok": True})

    def _model_call(self, path: str, body: dict[str, Any]) -> None:
        fake = self.fake
        model = str(body.get("model", ""))
        wanted = "input" if path == RESPONSES else "messages"
        if not model or wanted not in body:
            self._send_json(400, error_body(400, f"model and {wanted} are required"))
            return
        failure = fake.take_failure(model)
        if failure is not None:
            self._send_json(failure.status, error_body(failure.status, failure.message))
            return
        spec = fake._take_spec(body, path)
        if spec.get("delay_s"):
            time.sleep(float(spec["delay_s"]))
        error = spec.get("error")
        if error:
            status = int(error.get("status", 500))
            self._send_json(status, error_body(status, error.get("message"), error.get("type"),
                                                          code=error.get("code")))
            return
        answer = fake.answer(body, spec)
        if not body.get("stream"):
            self._send_json(200, response_object(answer) if path == RESPONSES else chat_completion(answer))
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        if path == RESPONSES:
            for event in responses_events(answer):
                if answer.chunk_delay_s and event["type"] == "response.output_text.delta":
                    time.sleep(answer.chunk_delay_s)
                self._chunk(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            for chunk in chat_chunks(answer, include_usage):
                if answer.chunk_delay_s:
                    time.sleep(answer.chunk_delay_s)
                self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
