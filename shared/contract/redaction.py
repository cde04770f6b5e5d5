"""Masking API keys and secrets in anything loopwire writes out.

Every output goes through :func:`redact`: error events and replies (contract/protocol.py),
log lines (observability/logs.py), span attributes and exported spans
(observability/tracing/), the console. It sits in the contract layer because the contract's
own bodies (`make_event`, `error_reply`) redact what they carry, and every layer above
uses it; it depends on nothing but the standard library.

Configured secrets (a NATS password, a Redis password) are registered with
:func:`register_secret` (runtime/credentials.py), so they are masked wherever they
appear, whatever their shape.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

_SECRET_ENV_VARS = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "OPENAI_API_KEY", "LOOPWIRE_NATS_PASSWORD",
                    "LOOPWIRE_NATS_TOKEN", "LOOPWIRE_REDIS_PASSWORD")

_KEY_VALUE = (
    r"(?i)\b((?:x-)?api[_-]?key|access[_-]?token|auth[_-]?token|refresh[_-]?token|client[_-]?secret"
    r"|secret|password|passwd|pwd|token)"
    r"([\"']?\s*[:=]\s*[\"']?)"
    r"([^\s\"',;&}]+)"
)
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"sk-ant-[A-Za-z0-9_\-]{4,}"), "sk-ant-***"),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{16,}"), "sk-***"),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), "gh_***"),
    (re.compile(r"\bxox[abpr]-[A-Za-z0-9\-]{10,}"), "xox-***"),
    (re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=*\-]+"), "Bearer ***"),
    (re.compile(r"(?i)\bBasic\s+[A-Za-z0-9+/=]{8,}"), "Basic ***"),
    (re.compile(_KEY_VALUE), r"\1\2***"),
    # credentials in URLs: scheme://user:password@host
    (re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^:/@\s]*:)[^@\s/]+@"), r"\1***@"),
)
_SECRET_KEY = re.compile(
    r"(?i)^(?:x-)?(?:api[_-]?key|authorization|proxy-authorization|credentials?|"
    r"(?:access|auth|refresh|id|bearer)?[_-]?token|.*secret.*|.*password.*|passwd|pwd)$"
)
_literal_secrets: set[str] = set()


def register_secret(value: str | None, min_length: int = 8) -> None:
    """Mask this exact string wherever it appears (e.g. a configured password). Values
    shorter than `min_length` are left alone: masking every "abc" would garble the logs
    (configured credentials use 4, shared/runtime/credentials.py)."""
    if value and len(value) >= max(min_length, 4):
        _literal_secrets.add(value)


def register_env_secrets() -> None:
    """Register the values of the well-known secret variables (ANTHROPIC_API_KEY, ...)."""
    for name in _SECRET_ENV_VARS:
        register_secret(os.environ.get(name))


def redact(value: Any) -> Any:
    """Mask API keys and secrets in `value` (a string, or dicts/lists of them).

    Catches ``sk-ant-...`` and other provider keys, ``Bearer``/``Basic`` credentials,
    ``api_key=...`` / ``"password": "..."`` pairs, ``user:pass@`` in URLs, registered
    literal secrets, and any string under a key named like a secret. Other types pass
    through unchanged; bytes come back as a redacted str."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, bytes | bytearray):
        return redact_text(bytes(value).decode("utf-8", errors="replace"))
    if isinstance(value, Mapping):
        return {k: ("***" if isinstance(v, str) and isinstance(k, str) and _SECRET_KEY.match(k) else redact(v))
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    return value


def redact_text(text: str) -> str:
    """`text` with every secret :func:`redact` knows masked."""
    for secret in _literal_secrets:
        if secret in text:
            text = text.replace(secret, "***")
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    return text
