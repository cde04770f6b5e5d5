"""The chart's secrets and NATS authentication: existing secrets referenced, not created;
one auth mode at a time; tokens, TLS and the Redis password from secrets."""

from __future__ import annotations

import base64
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest

from tests.unit.deploy.chart import (
    KUBE_VERSION,
    NAMESPACE,
    RELEASE,
    SERVICES,
    component,
    container,
    env_of,
    of_kind,
    render,
)

pytestmark = pytest.mark.unit


# -- secrets and NATS auth -------------------------------------------------------------------


def test_existing_secrets_are_referenced_not_created(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["existing-secret"]
    assert of_kind(objects, "Secret") == {}
    deployments = of_kind(objects, "Deployment")
    for service in SERVICES:
        dep = deployments[component(service)]
        env = env_of(dep)
        # The Anthropic key reaches the llm pods only.
        if service == "llm":
            assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"] == {
                "name": "loopwire-anthropic",
                "key": "ANTHROPIC_API_KEY",
            }
            assert env["ANTHROPIC_BASE_URL"]["value"] == "https://llm-gateway.internal.example"
        else:
            assert "ANTHROPIC_API_KEY" not in env
        # Redis URL from its Secret, so not in the ConfigMap.
        assert env["LOOPWIRE_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {
            "name": "loopwire-redis",
            "key": "url",
        }
        # NATS credentials file mounted read-only and named by LOOPWIRE_NATS_CREDS.
        assert env["LOOPWIRE_NATS_CREDS"]["value"] == "/etc/loopwire/nats/loopwire.creds"
        mounts = {m["name"]: m for m in container(dep)["volumeMounts"]}
        assert mounts["nats-credentials"] == {
            "name": "nats-credentials",
            "mountPath": "/etc/loopwire/nats",
            "readOnly": True,
        }
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        assert volumes["nats-credentials"]["secret"]["secretName"] == "loopwire-nats-creds"
        assert "LOOPWIRE_NATS_USER" not in env
    (cm,) = of_kind(objects, "ConfigMap").values()
    assert "LOOPWIRE_REDIS_URL" not in cm["data"]
    assert cm["data"]["LOOPWIRE_TOOL_MODULES"] == "my_tools.search,my_tools.files"


def test_api_key_value_creates_a_secret_for_llm(chart: helm.Chart) -> None:
    objects = render(chart, {"anthropic": {"apiKey": "sk-ant-test"}})
    secrets = of_kind(objects, "Secret")
    secret = secrets[f"{RELEASE}-loopwire-anthropic"]
    kubernetes_validate.validate(secret, KUBE_VERSION, strict=True)
    assert base64.b64decode(secret["data"]["api-key"]) == b"sk-ant-test"
    llm = of_kind(objects, "Deployment")[component("llm")]
    assert env_of(llm)["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{RELEASE}-loopwire-anthropic",
        "key": "api-key",
    }
    # A changed key rolls the llm pods.
    assert "checksum/secret" in llm["spec"]["template"]["metadata"]["annotations"]


def test_nats_user_password_from_secret(chart: helm.Chart) -> None:
    objects = render(chart, {"nats": {"userPasswordSecret": {"name": "nats-auth"}}})
    for dep in of_kind(objects, "Deployment").values():
        env = env_of(dep)
        assert env["LOOPWIRE_NATS_USER"]["valueFrom"]["secretKeyRef"] == {"name": "nats-auth", "key": "user"}
        assert env["LOOPWIRE_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "nats-auth",
            "key": "password",
        }
        assert "LOOPWIRE_NATS_CREDS" not in env


def test_nats_auth_modes_are_exclusive(chart: helm.Chart) -> None:
    for both in ({"userPasswordSecret": {"name": "a"}, "credentialsSecret": {"name": "b"}},
                 {"tokenSecret": {"name": "a"}, "userPasswordSecret": {"name": "b"}},
                 {"credentialsSecret": {"name": "a"}, "tokenSecret": {"name": "b"}}):
        with pytest.raises(helm.HelmRenderError, match="exclusive"):
            chart.render({"nats": both}, name=RELEASE, namespace=NAMESPACE)
    with pytest.raises(helm.HelmRenderError, match="go together"):
        chart.render({"nats": {"tlsSecret": {"name": "t", "certKey": "tls.crt"}}}, name=RELEASE, namespace=NAMESPACE)


def test_nats_token_tls_and_redis_password_from_secrets(chart: helm.Chart) -> None:
    """Every credential comes from a Secret the operator made: the token and the Redis
    password as secretKeyRefs, the CAs and the client certificate as read-only files."""
    objects = render(chart, {
        "nats": {"tokenSecret": {"name": "nats-token"},
                 "tlsSecret": {"name": "nats-tls", "certKey": "tls.crt", "keyKey": "tls.key"}},
        "redis": {"url": "rediss://redis:6380/0", "passwordSecret": {"name": "redis-auth"},
                  "tlsCaSecret": {"name": "redis-ca"}}})
    assert of_kind(objects, "Secret") == {}
    for dep in of_kind(objects, "Deployment").values():
        kubernetes_validate.validate(dep, KUBE_VERSION, strict=True)
        env = env_of(dep)
        assert env["LOOPWIRE_NATS_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "nats-token", "key": "token"}
        assert env["LOOPWIRE_NATS_TLS_CA"]["value"] == "/etc/loopwire/nats-tls/ca.crt"
        assert env["LOOPWIRE_NATS_TLS_CERT"]["value"] == "/etc/loopwire/nats-tls/tls.crt"
        assert env["LOOPWIRE_NATS_TLS_KEY"]["value"] == "/etc/loopwire/nats-tls/tls.key"
        assert env["LOOPWIRE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {"name": "redis-auth",
                                                                               "key": "redis-password"}
        assert env["LOOPWIRE_REDIS_TLS_CA"]["value"] == "/etc/loopwire/redis-tls/ca.crt"
        assert "LOOPWIRE_NATS_USER" not in env
        mounts = {m["name"]: m for m in container(dep)["volumeMounts"]}
        assert mounts["nats-tls"]["readOnly"] is True and mounts["redis-tls"]["readOnly"] is True
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
        assert [i["key"] for i in volumes["nats-tls"]["secret"]["items"]] == ["ca.crt", "tls.crt", "tls.key"]
        assert volumes["redis-tls"]["secret"]["secretName"] == "redis-ca"
