"""NATS decentralised auth for a test: an operator, an account and a user, their JWTs
signed with nkeys (ed25519), a server config that trusts the operator with the account
preloaded, and the user's `.creds` file (what `nsc generate creds` writes)."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from pathlib import Path

import nkeys


def _keypair(prefix: int) -> nkeys.KeyPair:
    return nkeys.from_seed(bytearray(nkeys.encode_seed(os.urandom(32), prefix)))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _jwt(issuer: nkeys.KeyPair, subject: str, name: str, nats: dict[str, object]) -> str:
    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    claims = {"jti": uuid.uuid4().hex.upper(), "iat": int(time.time()), "iss": issuer.public_key.decode(),
              "name": name, "sub": subject, "nats": {**nats, "version": 2}}
    payload = _b64(json.dumps(claims).encode())
    signature = _b64(issuer.sign(f"{header}.{payload}".encode()))
    return f"{header}.{payload}.{signature}"


UNLIMITED = {"subs": -1, "data": -1, "payload": -1}


def operator_setup(directory: Path) -> tuple[str, Path]:
    """(the server config lines that trust the operator, the path of the user's creds)."""
    operator = _keypair(nkeys.PREFIX_BYTE_OPERATOR)
    account = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    user = _keypair(nkeys.PREFIX_BYTE_USER)
    operator_jwt = _jwt(operator, operator.public_key.decode(), "test-operator", {"type": "operator"})
    account_jwt = _jwt(operator, account.public_key.decode(), "loopwire", {
        "type": "account", "limits": {**UNLIMITED, "imports": -1, "exports": -1, "wildcards": True, "conn": -1,
                                      "leaf": -1}})
    # JetStream in operator mode needs a system account
    system = _keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    system_jwt = _jwt(operator, system.public_key.decode(), "SYS", {"type": "account", "limits": UNLIMITED})
    user_jwt = _jwt(account, user.public_key.decode(), "loopwire-services",
                    {"type": "user", "pub": {}, "sub": {}, **UNLIMITED})
    creds = directory / "user.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\n" + user_jwt + "\n------END NATS USER JWT------\n\n"
        "-----BEGIN USER NKEY SEED-----\n" + user.seed.decode() + "\n------END USER NKEY SEED------\n")
    config = (f"operator: {operator_jwt}\nresolver: MEMORY\nsystem_account: {system.public_key.decode()}\n"
              f"resolver_preload: {{\n  {account.public_key.decode()}: {account_jwt}\n"
              f"  {system.public_key.decode()}: {system_jwt}\n}}\n")
    return config, creds
