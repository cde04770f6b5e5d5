"""Logging for loopwire: one line per record, with session id, run id and trace id.

Usage::

    from loopwire.shared.observability.logs import log_context, setup_logging

    setup_logging(settings.log_level, json=settings.log_json)   # once, at process start

    log = logging.getLogger("loopwire.router")
    with log_context(session_id=env.session_id, run_id=env.run_id):
        log.info("turn %d started", turn)     # carries session_id, run_id, trace_id

Text lines (``json=False``)::

    2026-11-30T10:00:00.123Z INFO  loopwire.router [sid=s1 run=r1 trace=4bf9...] turn 3 started

JSON lines (``json=True``, orjson), one object per line with ``ts``, ``level``, ``logger``,
``msg``, ``session_id``, ``run_id``, ``trace_id``, ``span_id``, any ``extra={...}`` fields,
and ``exc`` for exceptions.

The ids come from context variables (:data:`session_id_var`, :data:`run_id_var`), so they
follow asyncio tasks: set them with :func:`log_context` in a handler and every line logged
below it, in any module, carries them. The trace id is the current OpenTelemetry span's
(present whenever an envelope carried a traceparent, even with export off). Messages,
extras and tracebacks go through :func:`loopwire.shared.contract.redaction.redact`: API keys and
secrets never reach a log line.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, TextIO

import orjson
from opentelemetry import trace

from loopwire.shared.contract.redaction import redact, register_env_secrets

__all__ = ["log_context", "run_id_var", "session_id_var", "setup_logging"]

session_id_var: ContextVar[str | None] = ContextVar("loopwire_session_id", default=None)
"""Session id of the work being done in this task (None outside a session)."""
run_id_var: ContextVar[str | None] = ContextVar("loopwire_run_id", default=None)
"""Run id of the work being done in this task (None outside a run)."""

_UNSET: Any = object()

# Attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message", "asctime", "session_id", "run_id", "trace_id", "span_id", "taskName",
}


@contextmanager
def log_context(session_id: str | None = _UNSET, run_id: str | None = _UNSET) -> Iterator[None]:
    """Set the session id and/or run id for every log line in this block (and the tasks
    it starts); the previous values come back on exit."""
    tokens = []
    if session_id is not _UNSET:
        tokens.append((session_id_var, session_id_var.set(session_id)))
    if run_id is not _UNSET:
        tokens.append((run_id_var, run_id_var.set(run_id)))
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


class ContextFilter(logging.Filter):
    """Adds ``session_id``, ``run_id``, ``trace_id`` and ``span_id`` to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.session_id = session_id_var.get()
        record.run_id = run_id_var.get()
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            record.trace_id = format(ctx.trace_id, "032x")
            record.span_id = format(ctx.span_id, "016x")
        else:
            record.trace_id = None
            record.span_id = None
        return True


def _timestamp(record: logging.LogRecord) -> str:
    return (datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"))


def _message(record: logging.LogRecord) -> str:
    try:
        return redact(record.getMessage())
    except Exception:  # a bad format string must not lose the line
        return redact(f"{record.msg!r} {record.args!r}")


class JsonFormatter(logging.Formatter):
    """One JSON object per line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "msg": _message(record),
            "session_id": getattr(record, "session_id", None),
            "run_id": getattr(record, "run_id", None),
            "trace_id": getattr(record, "trace_id", None),
            "span_id": getattr(record, "span_id", None),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                out[key] = redact(value)
        if record.exc_info:
            out["exc"] = redact(self.formatException(record.exc_info))
        if record.stack_info:
            out["stack"] = redact(record.stack_info)
        return orjson.dumps(out, default=str).decode()


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger [sid=.. run=.. trace=..] message``; the bracket lists only what is set."""

    def format(self, record: logging.LogRecord) -> str:
        ids = [f"{name}={value}" for name, value in (
            ("sid", getattr(record, "session_id", None)),
            ("run", getattr(record, "run_id", None)),
            ("trace", getattr(record, "trace_id", None)),
        ) if value]
        bracket = f" [{' '.join(ids)}]" if ids else ""
        line = f"{_timestamp(record)} {record.levelname:<5} {record.name}{bracket} {_message(record)}"
        if record.exc_info:
            line += "\n" + redact(self.formatException(record.exc_info))
        if record.stack_info:
            line += "\n" + redact(record.stack_info)
        return line


class _LoopwireHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Marks the handler setup_logging installed, so a second call replaces it."""


def setup_logging(level: str | int = "INFO", json: bool = False, stream: TextIO | None = None) -> logging.Handler:
    """Configure the root logger: one handler writing text or JSON lines to `stream`
    (default stderr). Calling it again replaces the handler it installed before."""
    register_env_secrets()
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _LoopwireHandler):
            root.removeHandler(handler)
    handler = _LoopwireHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonFormatter() if json else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    return handler
