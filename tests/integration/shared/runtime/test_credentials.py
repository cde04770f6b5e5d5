"""NATS and Redis credentials from operator settings (shared/runtime/credentials.py), against real
servers: user and password, token, nkey seed, TLS with a throwaway CA and mutual TLS, a
Redis with `requirepass` — through FastStream's broker (the services) and plain nats-py
(the CLI and client) alike."""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import nkeys
import pytest

from loopwire.client import LoopwireClient
from loopwire.launcher import make_broker
from loopwire.settings import Settings
from loopwire.shared.contract.redaction import redact
from loopwire.shared.runtime.credentials import (
    CredentialsError,
    display_url,
    nats_connect_options,
    nats_security,
    redis_connect_options,
    register_configured_secrets,
)
from loopwire.shared.stores.redis_connection import connect_redis
from loopwire.testing.servers import ServerHandle, start_nats, start_redis
from tests.tls_certs import TlsFiles, make_tls_files

pytestmark = pytest.mark.integration


def server_with(tmp_path: Path, auth: str, env: dict[str, str] | None = None,
                tls: dict[str, object] | None = None) -> ServerHandle:
    conf = tmp_path / "auth.conf"
    conf.write_text(auth)
    return start_nats(include=conf, env=env or {}, tls=tls)  # type: ignore[arg-type]


async def round_trip(settings: Settings) -> None:
    """A request answered by a FastStream broker connected with `settings`, asked by plain
    nats-py connected with the same settings."""
    broker = make_broker(settings)

    @broker.subscriber("auth.echo")
    async def echo(body: bytes) -> bytes:
        return b"echo:" + body

    await broker.start()
    try:
        nc = await nats.connect(**nats_connect_options(settings))
        try:
            reply = await nc.request("auth.echo", b"hi", timeout=5)
            assert reply.data == b"echo:hi"
        finally:
            await nc.drain()
    finally:
        await broker.stop()


async def refused(settings: Settings) -> str:
    """The error nats-py gets when it connects with `settings` (no reconnect attempts)."""
    with pytest.raises(Exception) as caught:
        await nats.connect(**nats_connect_options(settings), allow_reconnect=False, max_reconnect_attempts=0,
                           connect_timeout=2)
    return f"{type(caught.value).__name__}: {caught.value}"


# -- settings are checked before anything connects ------------------------------------------
@pytest.mark.parametrize(("fields", "message"), [
    ({"nats_user": "a", "nats_password": "b", "nats_token": "c"}, "not LOOPWIRE_NATS_USER and LOOPWIRE_NATS_TOKEN"),
    ({"nats_password": "b"}, "LOOPWIRE_NATS_PASSWORD needs LOOPWIRE_NATS_USER"),
    ({"nats_creds": "/nonexistent/x.creds"}, "LOOPWIRE_NATS_CREDS='/nonexistent/x.creds': no such file"),
    ({"nats_creds_file": "/nonexistent/y.creds"}, "LOOPWIRE_NATS_CREDS_FILE="),
    ({"nats_nkey_seed": "/nonexistent/seed"}, "LOOPWIRE_NATS_NKEY_SEED="),
    ({"nats_tls_cert": "/x.pem"}, "LOOPWIRE_NATS_TLS_CERT and LOOPWIRE_NATS_TLS_KEY go together"),
    ({"nats_tls_ca": "/nonexistent/ca.pem"}, "LOOPWIRE_NATS_TLS_CA="),
])
def test_contradictory_or_missing_nats_credentials_are_refused(fields: dict[str, str], message: str) -> None:
    with pytest.raises(CredentialsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        nats_security(Settings(**fields))  # type: ignore[arg-type]


def test_redis_ca_needs_rediss() -> None:
    with pytest.raises(CredentialsError, match="rediss://"):
        redis_connect_options(Settings(redis_url="redis://h:6379/0", redis_tls_ca="/x.pem"))


def test_creds_file_and_its_deprecated_alias_reach_nats_py(tmp_path: Path) -> None:
    creds = tmp_path / "user.creds"
    creds.write_text("not checked until connect")
    for fields in ({"nats_creds": str(creds)}, {"nats_creds_file": str(creds)}):
        options = nats_connect_options(Settings(**fields))  # type: ignore[arg-type]
        assert options["user_credentials"] == str(creds)


def test_urls_are_shown_without_their_secrets() -> None:
    settings = Settings(nats_url="nats://svc:n4ts-pw-7731@h1:4222,nats://tok-99123@h2:4222",
                        redis_url="rediss://:r3dis-pw-5521@r:6380/0", nats_token=None)
    assert display_url(settings.nats_url) == "nats://svc:***@h1:4222,nats://***@h2:4222"
    assert display_url(settings.redis_url) == "rediss://:***@r:6380/0"
    register_configured_secrets(settings)
    line = redact("could not reach h1 with n4ts-pw-7731, h2 with tok-99123, r with r3dis-pw-5521")
    assert "n4ts-pw-7731" not in line and "tok-99123" not in line and "r3dis-pw-5521" not in line


# -- real servers -----------------------------------------------------------------------------
@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path)


async def test_user_and_password(tmp_path: Path) -> None:
    """LOOPWIRE_NATS_USER / _PASSWORD reach FastStream's broker (they used to stop `loopwire
    up` at start-up) and nats-py; a wrong password is refused."""
    server = server_with(tmp_path, "authorization { users: [{user: svc, password: $PW}] }\n", {"PW": "s3cret-pw"})
    try:
        await round_trip(Settings(nats_url=server.url, nats_user="svc", nats_password="s3cret-pw"))
        error = await refused(Settings(nats_url=server.url, nats_user="svc", nats_password="wrong"))
        assert "Authorization" in error or "authorization" in error
    finally:
        server.stop()


async def test_token(tmp_path: Path) -> None:
    server = server_with(tmp_path, "authorization { token: $TOKEN }\n", {"TOKEN": "t0ken-42-abcdef"})
    try:
        await round_trip(Settings(nats_url=server.url, nats_token="t0ken-42-abcdef"))
        assert "uthorization" in await refused(Settings(nats_url=server.url, nats_token="other-token"))
    finally:
        server.stop()


async def test_nkey_seed_file(tmp_path: Path) -> None:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    seed_file = tmp_path / "user.nk"
    seed_file.write_bytes(seed)
    server = server_with(tmp_path, f"authorization {{ users: [{{nkey: {public}}}] }}\n")
    try:
        await round_trip(Settings(nats_url=server.url, nats_nkey_seed=str(seed_file)))
        assert "uthorization" in await refused(Settings(nats_url=server.url))
    finally:
        server.stop()


async def test_mutual_tls_with_a_private_ca(tmp_path: Path, tls_files: TlsFiles) -> None:
    """TLS from LOOPWIRE_NATS_TLS_CA (a nats:// URL: the server asks for TLS), the client
    certificate from _CERT/_KEY; without the CA the server's certificate is not trusted,
    without a client certificate the server refuses."""
    tls = {"cert_file": str(tls_files.server_cert), "key_file": str(tls_files.server_key),
           "ca_file": str(tls_files.ca), "verify": True}
    server = server_with(tmp_path, "authorization { users: [{user: svc, password: pw-tls-1}] }\n", tls=tls)
    base = {"nats_url": server.url, "nats_user": "svc", "nats_password": "pw-tls-1"}
    try:
        await round_trip(Settings(**base, nats_tls_ca=str(tls_files.ca), nats_tls_cert=str(tls_files.client_cert),
                                  nats_tls_key=str(tls_files.client_key)))
        assert "CERTIFICATE_VERIFY_FAILED" in await refused(Settings(**base, nats_tls_cert=str(tls_files.client_cert),
                                                                     nats_tls_key=str(tls_files.client_key)))
        await refused(Settings(**base, nats_tls_ca=str(tls_files.ca)))  # no client certificate
    finally:
        server.stop()


async def test_the_client_of_the_cli_uses_the_settings(tmp_path: Path) -> None:
    """`loopwire run` and `loopwire transcript` connect with LoopwireClient.from_settings."""
    server = server_with(tmp_path, "authorization { users: [{user: cli, password: cli-pw-1234}] }\n")
    try:
        settings = Settings(nats_url=server.url, nats_user="cli", nats_password="cli-pw-1234", subject_prefix="lwc")
        async with await LoopwireClient.from_settings(settings) as lw:
            assert lw.nc.is_connected and lw.subjects.prefix == "lwc"
    finally:
        server.stop()


@pytest.fixture
def redis_with_password() -> Iterator[ServerHandle]:
    server = start_redis(password="r3dis-pw-8812")
    yield server
    server.stop()


async def test_redis_password_from_settings(redis_with_password: ServerHandle) -> None:
    url = redis_with_password.url
    good = connect_redis(url, **redis_connect_options(Settings(redis_url=url, redis_password="r3dis-pw-8812")))
    bad = connect_redis(url)
    try:
        assert await good.ping()
        with pytest.raises(Exception, match="(?i)auth"):
            await asyncio.wait_for(bad.ping(), 5)
    finally:
        await good.aclose()
        await bad.aclose()


def test_error_events_and_replies_mask_secrets() -> None:
    """An error's message often quotes an exception; what it quotes never leaves whole."""
    from loopwire.shared.contract.protocol import error_reply, make_event

    register_configured_secrets(Settings(redis_password="pw-in-an-error-77"))
    event = make_event("error", "s1", "r1", seq=3, code="step_failed",
                       message="cannot reach redis://:hunter2222@db:6379/0 (pw-in-an-error-77)")
    assert event["message"] == "cannot reach redis://:***@db:6379/0 (***)"
    reply = error_reply("bad_request", "token=abcdef123456 refused")
    assert "abcdef123456" not in reply["error"]["message"]
    text = make_event("message", "s1", "r1", seq=4, message={"role": "assistant", "content": "my password is a"})
    assert text["message"]["content"] == "my password is a", "only error messages are rewritten"


async def test_creds_file_against_an_operator_mode_server(tmp_path: Path) -> None:
    """LOOPWIRE_NATS_CREDS (and its deprecated alias) with a user JWT signed by an account
    the server's operator trusts (decentralised auth, as `nsc` sets it up)."""
    from tests.nats_jwt import operator_setup

    config, creds = operator_setup(tmp_path)
    server = server_with(tmp_path, config)
    try:
        await round_trip(Settings(nats_url=server.url, nats_creds=str(creds)))
        await round_trip(Settings(nats_url=server.url, nats_creds_file=str(creds)))
        assert "uthorization" in await refused(Settings(nats_url=server.url))
    finally:
        server.stop()


@pytest.fixture
async def redis_over_tls(redis_with_password: ServerHandle, tls_files: TlsFiles) -> AsyncIterator[str]:
    """A `rediss://` URL: a TLS endpoint with the throwaway CA's server certificate in front
    of the password-protected redis-server (the pip-shipped binary has no TLS of its own)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(tls_files.server_cert), str(tls_files.server_key))

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def forward(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        redis_r, redis_w = await asyncio.open_connection("127.0.0.1", redis_with_password.port)
        await asyncio.gather(pipe(client_r, redis_w), pipe(redis_r, client_w))

    server = await asyncio.start_server(forward, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    yield f"rediss://127.0.0.1:{port}/0"
    server.close()


async def test_rediss_with_a_private_ca(redis_over_tls: str, tls_files: TlsFiles) -> None:
    """LOOPWIRE_REDIS_TLS_CA verifies the server of a rediss:// URL; without it the
    certificate of the private CA is not trusted."""
    settings = Settings(redis_url=redis_over_tls, redis_password="r3dis-pw-8812", redis_tls_ca=str(tls_files.ca))
    good = connect_redis(settings.redis_url, **redis_connect_options(settings))
    untrusted = connect_redis(redis_over_tls, password="r3dis-pw-8812")
    try:
        assert await good.set("tls-check", b"1") and await good.get("tls-check") == b"1"
        with pytest.raises(Exception, match="(?i)certificate"):
            await asyncio.wait_for(untrusted.ping(), 5)
    finally:
        await good.aclose()
        await untrusted.aclose()
