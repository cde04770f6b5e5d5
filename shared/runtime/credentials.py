"""How every loopwire process authenticates to NATS and Redis, from operator settings.

One function, :func:`nats_security`, turns the ``LOOPWIRE_NATS_*`` settings into
FastStream's security object; :func:`nats_connect_options` derives plain nats-py
``connect()`` keyword arguments from that same object, so the services (FastStream) and
the CLI and client (nats-py) can never authenticate differently. Exactly one way of
authenticating may be configured (user and password, token, creds file, nkey seed, or
credentials inside the URL); TLS (a CA, a client certificate) combines with any of them.

Every configured secret is registered with the redaction of
:mod:`loopwire.shared.contract.redaction` (:func:`register_configured_secrets`), so it is masked in
log lines, spans and error events, and :func:`display_url` is what the console prints.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from faststream.nats.security import (
    NatsCredentials,
    NatsNKey,
    NatsSecurity,
    NatsToken,
    NatsUserPassword,
    parse_security,
)

from loopwire.shared.contract.redaction import redact, register_secret
from loopwire.shared.runtime.settings import RuntimeSettings
from loopwire.shared.stores.redis_connection import RedisTopology, connect_redis

__all__ = ["CredentialsError", "connect_configured_redis", "display_url", "nats_connect_options", "nats_security",
           "nats_servers", "redis_connect_options", "redis_topology", "register_configured_secrets",
           "split_servers", "wait_replicas"]


class CredentialsError(ValueError):
    """The NATS or Redis credential settings are contradictory or name a missing file."""


def _readable(path: str, variable: str) -> str:
    if not Path(path).is_file():
        raise CredentialsError(f"{variable}={path!r}: no such file")
    return path


def nats_tls_context(settings: RuntimeSettings) -> ssl.SSLContext | None:
    """A TLS context when a CA or a client certificate is configured; None otherwise (a
    `tls://` URL then uses the system's CAs, as nats-py does by itself)."""
    if not (settings.nats_tls_ca or settings.nats_tls_cert or settings.nats_tls_key):
        return None
    if bool(settings.nats_tls_cert) != bool(settings.nats_tls_key):
        raise CredentialsError("LOOPWIRE_NATS_TLS_CERT and LOOPWIRE_NATS_TLS_KEY go together")
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if settings.nats_tls_ca:
        context.load_verify_locations(cafile=_readable(settings.nats_tls_ca, "LOOPWIRE_NATS_TLS_CA"))
    if settings.nats_tls_cert and settings.nats_tls_key:
        context.load_cert_chain(_readable(settings.nats_tls_cert, "LOOPWIRE_NATS_TLS_CERT"),
                                _readable(settings.nats_tls_key, "LOOPWIRE_NATS_TLS_KEY"))
    return context


def nats_security(settings: RuntimeSettings) -> NatsSecurity | None:
    """FastStream's security object for the configured NATS authentication and TLS; None
    when neither is configured (credentials in the URL, if any, then apply)."""
    creds = settings.nats_creds or settings.nats_creds_file
    chosen = [name for name, value in (
        ("LOOPWIRE_NATS_USER", settings.nats_user), ("LOOPWIRE_NATS_TOKEN", settings.nats_token),
        ("LOOPWIRE_NATS_CREDS", creds), ("LOOPWIRE_NATS_NKEY_SEED", settings.nats_nkey_seed)) if value]
    if len(chosen) > 1:
        raise CredentialsError(f"set one way of authenticating to NATS, not {' and '.join(chosen)}")
    if settings.nats_password and not settings.nats_user:
        raise CredentialsError("LOOPWIRE_NATS_PASSWORD needs LOOPWIRE_NATS_USER")
    tls = nats_tls_context(settings)
    if settings.nats_user:
        return NatsUserPassword(settings.nats_user, settings.nats_password or "", ssl_context=tls)
    if settings.nats_token:
        return NatsToken(settings.nats_token, ssl_context=tls)
    if creds:
        variable = "LOOPWIRE_NATS_CREDS" if settings.nats_creds else "LOOPWIRE_NATS_CREDS_FILE"
        return NatsCredentials.from_file(_readable(creds, variable), ssl_context=tls)
    if settings.nats_nkey_seed:
        return NatsNKey.from_file(_readable(settings.nats_nkey_seed, "LOOPWIRE_NATS_NKEY_SEED"), ssl_context=tls)
    if tls is not None:
        return NatsSecurity(ssl_context=tls)
    return None


def split_servers(url: str) -> list[str]:
    """A comma-separated list of NATS URLs (one cluster's servers) as the list nats-py
    takes: `nats.connect("a,b")` itself fails with "invalid connect url option"."""
    return [one.strip() for one in url.split(",") if one.strip()]


def nats_servers(settings: RuntimeSettings) -> list[str]:
    return split_servers(settings.nats_url)


def nats_connect_options(settings: RuntimeSettings) -> dict[str, Any]:
    """Keyword arguments of ``nats.connect()`` for the same authentication and TLS as
    :func:`nats_security` (FastStream's own translation of it), plus the servers."""
    security = nats_security(settings)
    options = {key: value for key, value in parse_security(security).items() if value is not None}
    options["servers"] = nats_servers(settings)
    return options


def redis_connect_options(settings: RuntimeSettings) -> dict[str, Any]:
    """Keyword arguments of ``redis.asyncio.Redis.from_url`` besides the URL: the password
    when the URL holds none, and the CA of a `rediss://` server."""
    options: dict[str, Any] = {}
    if settings.redis_password and not urlsplit(settings.redis_url).password:
        options["password"] = settings.redis_password
    if settings.redis_tls_ca:
        if urlsplit(settings.redis_url).scheme != "rediss":
            raise CredentialsError("LOOPWIRE_REDIS_TLS_CA needs a rediss:// LOOPWIRE_REDIS_URL")
        options["ssl_ca_certs"] = _readable(settings.redis_tls_ca, "LOOPWIRE_REDIS_TLS_CA")
    return options


def redis_topology(settings: RuntimeSettings) -> RedisTopology:
    """The Redis layout the settings name: one server, a cluster, or a master behind
    sentinels; the sentinels get the same TLS as the master and their own password."""
    if settings.redis_cluster and settings.redis_sentinels:
        raise CredentialsError("set LOOPWIRE_REDIS_CLUSTER or LOOPWIRE_REDIS_SENTINELS, not both")
    sentinels: list[tuple[str, int]] = []
    for entry in (settings.redis_sentinels or "").split(","):
        host, colon, port = entry.strip().rpartition(":")
        if not entry.strip():
            continue
        if not colon or not host or not port.isdigit():
            raise CredentialsError(f"LOOPWIRE_REDIS_SENTINELS: expected host:port, got {entry.strip()!r}")
        sentinels.append((host, int(port)))
    if sentinels and not settings.redis_sentinel_master:
        raise CredentialsError("LOOPWIRE_REDIS_SENTINELS needs LOOPWIRE_REDIS_SENTINEL_MASTER (the master's name)")
    sentinel_options: dict[str, Any] = {}
    if sentinels:
        if settings.redis_sentinel_password:
            sentinel_options["password"] = settings.redis_sentinel_password
        if urlsplit(settings.redis_url).scheme == "rediss":
            sentinel_options["ssl"] = True
            if settings.redis_tls_ca:
                sentinel_options["ssl_ca_certs"] = _readable(settings.redis_tls_ca, "LOOPWIRE_REDIS_TLS_CA")
    return RedisTopology(settings.redis_url, cluster=settings.redis_cluster, sentinels=sentinels,
                         sentinel_master=settings.redis_sentinel_master, sentinel_options=sentinel_options)


def connect_configured_redis(settings: RuntimeSettings, **options: Any) -> Any:
    """The process's Redis client for the operator's settings: layout, password, TLS."""
    return connect_redis(redis_topology(settings), **{**redis_connect_options(settings), **options})


def wait_replicas(settings: RuntimeSettings) -> int:
    """How many replicas the writes a failover must not lose wait for (LOOPWIRE_REDIS_WAIT_REPLICAS)."""
    if settings.redis_wait_replicas is not None:
        return max(0, settings.redis_wait_replicas)
    return 1 if settings.redis_cluster or settings.redis_sentinels else 0


def register_configured_secrets(settings: RuntimeSettings) -> None:
    """Mask the configured NATS and Redis secrets (and passwords inside the URLs) in every
    redacted output: log lines, spans, error events, the console."""
    for value in (settings.nats_password, settings.nats_token, settings.redis_password,
                  settings.redis_sentinel_password):
        register_secret(value, min_length=4)
    for url in [*nats_servers(settings), *settings.redis_url.split(",")]:
        parts = urlsplit(url)
        if parts.password:
            register_secret(unquote(parts.password), min_length=4)
            register_secret(parts.password, min_length=4)
        elif parts.username and "@" in parts.netloc:
            # nats://TOKEN@host: a bare token in the user position
            register_secret(unquote(parts.username), min_length=4)


def display_url(url: str) -> str:
    """`url` (or a comma-separated list of them) as the console may show it: the user
    name stays, a password or a bare token becomes `***`."""
    shown = []
    for one in url.split(","):
        parts = urlsplit(one.strip())
        if "@" in parts.netloc:
            userinfo, host = parts.netloc.rsplit("@", 1)
            user, colon, _ = userinfo.partition(":")
            one = urlunsplit(parts._replace(netloc=f"{user}:***@{host}" if colon else f"***@{host}"))
        shown.append(str(redact(one.strip())))
    return ",".join(shown)
