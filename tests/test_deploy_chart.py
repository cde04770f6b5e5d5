"""The Helm chart, checked offline: lint, render, Kubernetes schemas and key properties.

helm-python-sdk (``import helm_python``) binds Helm 4's Go SDK through a bundled shared
library, so lint and render here are the real Helm code paths, with no ``helm`` binary and
no cluster. Every rendered object is validated with kubernetes-validate against the
Kubernetes 1.30 strict schemas (unknown fields fail). The Prometheus Operator kinds
(ServiceMonitor, PrometheusRule) are CRDs that kubernetes-validate has no schema for: they
are checked structurally below instead.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "loopwire"
KUBE_VERSION = "1.30.0"
RELEASE = "demo"
NAMESPACE = "agents"
SERVICES = ("router", "llm", "tools", "memory", "transcripts")
CRD_GROUP = "monitoring.coreos.com/v1"

SCENARIOS = {
    "default": None,
    "servicemonitor": CHART / "ci" / "servicemonitor-values.yaml",
    "existing-secret": CHART / "ci" / "existing-secret-values.yaml",
    "executors": CHART / "ci" / "executors-values.yaml",
}


def load_values(name: str) -> dict[str, Any] | None:
    path = SCENARIOS[name]
    return None if path is None else yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def chart() -> helm.Chart:
    loaded = helm.Chart.load(CHART)
    yield loaded
    loaded.close()


def render(chart: helm.Chart, values: dict[str, Any] | None, name: str = RELEASE) -> list[dict[str, Any]]:
    """All rendered objects (NOTES.txt is text, not a manifest)."""
    out = chart.render(values, name=name, namespace=NAMESPACE)
    objects = []
    for template, text in sorted(out.items()):
        if template.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


@pytest.fixture(scope="module")
def rendered(chart: helm.Chart) -> dict[str, list[dict[str, Any]]]:
    return {name: render(chart, load_values(name)) for name in SCENARIOS}


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def component(name: str) -> str:
    return f"{RELEASE}-loopwire-{name}"


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(deployment).get("env", [])}


# -- lint and schemas ------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_lint_strict_is_clean(scenario: str) -> None:
    report = helm.lint(CHART, load_values(scenario), strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"] == []
    # Severity 2 = warning, 3 = error; strict lint fails on both.
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_every_manifest_is_valid_kubernetes(rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    objects = rendered[scenario]
    assert objects
    for obj in objects:
        if obj["apiVersion"] == CRD_GROUP:
            continue  # CRDs: see test_monitoring_objects_are_well_formed
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        assert obj["metadata"]["namespace"] == NAMESPACE


def test_values_yaml_matches_values_schema() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema)
    for path in SCENARIOS.values():
        if path is not None:
            # The ci files are overrides: valid once merged; each key must still be known.
            jsonschema.validate(
                _deep_merge(
                    yaml.safe_load((CHART / "values.yaml").read_text()), yaml.safe_load(path.read_text())
                ),
                schema,
            )


@pytest.mark.parametrize(
    "bad",
    [
        {"services": {"router": {"replicaCount": "two"}}},
        {"services": {"routr": {"enabled": True}}},
        {"config": {"NATS_URL": "nats://x:4222"}},
        {"nats": {"url": "http://nats:4222"}},
        {"image": {"pullPolicy": "Sometimes"}},
        {"executors": {"enabled": "yes"}},
        {"executors": {"mountPath": "relative/dir"}},
        {"executors": {"image": {"name": "x"}}},
        {"serviceDefaults": {"autoscaling": {"targetCPUUtilizationPercentage": 150}}},
    ],
)
def test_schema_rejects_bad_values(chart: helm.Chart, bad: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)
    report = helm.lint(CHART, bad, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert report["errors"]


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# -- what the default install contains -------------------------------------------------------


def test_default_install_objects(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["default"]
    names = {component(s) for s in SERVICES}
    assert set(of_kind(objects, "Deployment")) == names
    assert set(of_kind(objects, "Service")) == names
    assert set(of_kind(objects, "PodDisruptionBudget")) == names
    assert set(of_kind(objects, "ConfigMap")) == {f"{RELEASE}-loopwire"}
    assert set(of_kind(objects, "ServiceAccount")) == {f"{RELEASE}-loopwire"}
    # Off unless asked for: autoscaling, Prometheus Operator objects, a chart-made Secret.
    for kind in ("HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule", "Secret"):
        assert of_kind(objects, kind) == {}, kind


def test_replicas_and_commands(rendered: dict[str, list[dict[str, Any]]]) -> None:
    deployments = of_kind(rendered["default"], "Deployment")
    expected = {"router": 2, "llm": 2, "tools": 2, "memory": 1, "transcripts": 1}
    for service, replicas in expected.items():
        dep = deployments[component(service)]
        assert dep["spec"]["replicas"] == replicas
        assert container(dep)["args"] == ["serve", service]
        assert container(dep)["image"] == "loopwire:0.1.0"
        assert dep["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 30


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_pods_are_locked_down(rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    for dep in of_kind(rendered[scenario], "Deployment").values():
        pod = dep["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001
        assert pod["automountServiceAccountToken"] is False
        ctx = container(dep)["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["allowPrivilegeEscalation"] is False
        assert ctx["capabilities"]["drop"] == ["ALL"]
        # The one writable path: an emptyDir at /tmp.
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container(dep)["volumeMounts"]}
        assert "emptyDir" in volumes[mounts["/tmp"]]
        assert container(dep)["resources"]["requests"]["memory"]


def test_executors_run_the_llm_pods_from_the_agents_image(rendered: dict[str, list[dict[str, Any]]],
                                                          chart: helm.Chart) -> None:
    deployments = of_kind(rendered["executors"], "Deployment")
    llm = deployments[component("llm")]
    c = container(llm)
    assert c["image"] == "registry.example/loopwire:0.1.0-agents"
    env = {e["name"]: e for e in c["env"]}
    assert env["LOOPWIRE_EXECUTOR_DIR"]["value"] == "/var/lib/loopwire-executor"
    assert env["HOME"]["value"] == "/var/lib/loopwire-executor/home"  # the agents write their homes
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "agents-openai", "key": "api-key"}
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in llm["spec"]["template"]["spec"]["volumes"]}
    assert volumes[mounts["/var/lib/loopwire-executor"]] == {"name": "executor", "persistentVolumeClaim": {
        "claimName": "loopwire-executor"}}
    assert c["resources"]["limits"]["memory"] == "4Gi"
    # the other services keep the plain image and no executor volume
    for name in ("router", "tools", "memory", "transcripts"):
        other = container(deployments[component(name)])
        assert other["image"] == "loopwire:0.1.0"
        assert "LOOPWIRE_EXECUTOR_DIR" not in {e["name"] for e in other["env"]}
        assert "/var/lib/loopwire-executor" not in {m["mountPath"] for m in other["volumeMounts"]}
    # without a claim, an emptyDir; the tag follows image.tag
    objects = render(chart, {"executors": {"enabled": True}, "image": {"tag": "1.2.3"}})
    own = of_kind(objects, "Deployment")[component("llm")]
    assert container(own)["image"] == "loopwire:1.2.3-agents"
    (executor,) = [v for v in own["spec"]["template"]["spec"]["volumes"] if v["name"] == "executor"]
    assert executor == {"name": "executor", "emptyDir": {"sizeLimit": "2Gi"}}
    # and off by default
    default_llm = container(of_kind(rendered["default"], "Deployment")[component("llm")])
    assert default_llm["image"] == "loopwire:0.1.0"
    assert "LOOPWIRE_EXECUTOR_DIR" not in {e["name"] for e in default_llm["env"]}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_probes_use_the_metrics_port(rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    for dep in of_kind(rendered[scenario], "Deployment").values():
        c = container(dep)
        assert c["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_labels_and_selectors(rendered: dict[str, list[dict[str, Any]]], scenario: str) -> None:
    objects = rendered[scenario]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "loopwire"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/part-of"] == "loopwire"
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["helm.sh/chart"] == "loopwire-0.1.0"
    services = of_kind(objects, "Service")
    pdbs = of_kind(objects, "PodDisruptionBudget")
    for name, dep in of_kind(objects, "Deployment").items():
        selector = dep["spec"]["selector"]["matchLabels"]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
        assert "app.kubernetes.io/version" not in selector  # selectors must never change
        assert services[name]["spec"]["selector"] == selector
        assert services[name]["spec"]["ports"][0]["targetPort"] == "metrics"
        if name in pdbs:
            assert pdbs[name]["spec"]["selector"]["matchLabels"] == selector


def test_config_map_holds_settings_not_secrets(rendered: dict[str, list[dict[str, Any]]]) -> None:
    (cm,) = of_kind(rendered["default"], "ConfigMap").values()
    data = cm["data"]
    assert data["LOOPWIRE_NATS_URL"].startswith("nats://")
    assert data["LOOPWIRE_REDIS_URL"].startswith("redis://")
    assert data["LOOPWIRE_METRICS_PORT"] == "9464"
    assert data["LOOPWIRE_STREAM_REPLICAS"] == "3"
    assert all(isinstance(v, str) for v in data.values())
    assert not any("PASSWORD" in k or "API_KEY" in k for k in data)
    for dep in of_kind(rendered["default"], "Deployment").values():
        assert container(dep)["envFrom"] == [{"configMapRef": {"name": cm["metadata"]["name"]}}]


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


# -- autoscaling, PDB, monitoring ------------------------------------------------------------


def test_autoscaling_and_per_service_overrides(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objects = rendered["servicemonitor"]
    hpas = of_kind(objects, "HorizontalPodAutoscaler")
    assert set(hpas) == {component("router"), component("llm")}
    deployments = of_kind(objects, "Deployment")
    router_hpa = hpas[component("router")]["spec"]
    assert router_hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": component("router"),
    }
    # maxReplicas overridden, minReplicas kept from serviceDefaults (maps merge one level).
    assert (router_hpa["minReplicas"], router_hpa["maxReplicas"]) == (2, 6)
    assert [m["resource"]["name"] for m in router_hpa["metrics"]] == ["cpu"]
    llm_metrics = hpas[component("llm")]["spec"]["metrics"]
    assert [m["resource"]["name"] for m in llm_metrics] == ["cpu", "memory"]
    # The HPA owns the replica count of the Deployments it scales.
    assert "replicas" not in deployments[component("router")]["spec"]
    assert deployments[component("tools")]["spec"]["replicas"] == 2
    # `pdb.enabled: false` on one service wins over the default `true`.
    assert component("transcripts") not in of_kind(objects, "PodDisruptionBudget")
    (cm,) = of_kind(objects, "ConfigMap").values()
    assert cm["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector.observability.svc:4318"


def test_monitoring_objects_are_well_formed(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Structural checks for the two CRD kinds kubernetes-validate cannot check."""
    objects = rendered["servicemonitor"]
    (sm,) = of_kind(objects, "ServiceMonitor").values()
    assert sm["apiVersion"] == CRD_GROUP
    assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert set(sm["spec"]) == {"selector", "namespaceSelector", "endpoints"}
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = sm["spec"]["endpoints"]
    relabelings = endpoint.pop("relabelings")
    assert endpoint == {"port": "metrics", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}
    # Target labels as in the compose stack (job="loopwire", component=<service>), and no
    # operator `service` label to clash with loopwire_steps_total{service=...}.
    assert {"action": "replace", "targetLabel": "job", "replacement": "loopwire"} in relabelings
    assert {
        "action": "replace",
        "sourceLabels": ["__meta_kubernetes_service_label_app_kubernetes_io_component"],
        "targetLabel": "component",
    } in relabelings
    assert {"action": "labeldrop", "regex": "service"} in relabelings
    for r in relabelings:
        assert r["action"] in {"replace", "keep", "drop", "labeldrop", "labelkeep", "labelmap", "hashmod"}
    # It selects exactly the release's five metrics Services.
    selector = sm["spec"]["selector"]["matchLabels"]
    selected = [
        s for s in of_kind(objects, "Service").values() if selector.items() <= s["metadata"]["labels"].items()
    ]
    assert len(selected) == len(SERVICES)
    assert all(any(p["name"] == "metrics" for p in s["spec"]["ports"]) for s in selected)

    (rule,) = of_kind(objects, "PrometheusRule").values()
    assert rule["apiVersion"] == CRD_GROUP
    assert set(rule["spec"]) == {"groups"}
    groups = rule["spec"]["groups"]
    assert [g["name"] for g in groups] == ["loopwire.kubernetes", "loopwire.extra"]
    _assert_rule_groups(groups)
    down, unavailable = groups[0]["rules"]
    assert down["alert"] == "LoopwireTargetDown"
    assert down["expr"] == f'up{{namespace="{NAMESPACE}", job="loopwire"}} == 0'
    # Prometheus templates pass through Helm untouched.
    assert (
        down["annotations"]["summary"] == "loopwire {{ $labels.component }} at {{ $labels.instance }} is down"
    )
    assert f'deployment=~"{RELEASE}-loopwire-(router|llm|tools|memory|transcripts)"' in unavailable["expr"]


# The PrometheusRule CRD's duration pattern (monitoring.coreos.com_prometheusrules.yaml).
DURATION = re.compile(
    r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
)


def _assert_rule_groups(groups: list[dict[str, Any]]) -> None:
    """The fields and types of the PrometheusRule CRD's spec.groups (operator v0.82)."""
    assert len({g["name"] for g in groups}) == len(groups)  # a list-map keyed by name
    for group in groups:
        assert set(group) <= {
            "name",
            "interval",
            "labels",
            "limit",
            "partial_response_strategy",
            "query_offset",
            "rules",
        }
        assert group["name"] and group["rules"]
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r)
            assert isinstance(r["expr"], str) and r["expr"].strip()
            assert set(r) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
            for field in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in r.get(field, {}).values())
            for field in ("for", "keep_firing_for"):
                if field in r:
                    assert DURATION.match(r[field]), r[field]


SAMPLE_RULES = """
groups:
  - name: loopwire.sample
    rules:
      - alert: LoopwireSample
        expr: sum(rate(loopwire_sample_total[5m])) > 1
        for: 2m
        labels: {severity: page}
"""


def test_rules_file_groups_are_added(chart: helm.Chart) -> None:
    values = {"prometheusRule": {"enabled": True, "defaultRules": False, "rulesFile": SAMPLE_RULES}}
    (rule,) = of_kind(render(chart, values), "PrometheusRule").values()
    assert rule["spec"]["groups"] == yaml.safe_load(SAMPLE_RULES)["groups"]


def test_compose_alerts_file_can_feed_the_prometheus_rule(chart: helm.Chart) -> None:
    alerts = ROOT / "deploy" / "prometheus" / "alerts.yml"
    if not alerts.exists():
        pytest.skip("deploy/prometheus/alerts.yml is not there yet")
    values = {"prometheusRule": {"enabled": True, "rulesFile": alerts.read_text()}}
    (rule,) = of_kind(render(chart, values), "PrometheusRule").values()
    groups = rule["spec"]["groups"]
    _assert_rule_groups(groups)
    compose_groups = yaml.safe_load(alerts.read_text())["groups"]
    assert groups[1:] == compose_groups
    # A default alert the file already has is not added twice.
    alerts_by_name = [r["alert"] for g in groups for r in g["rules"] if "alert" in r]
    assert len(alerts_by_name) == len(set(alerts_by_name))
    assert "LoopwireReplicasUnavailable" in alerts_by_name


def test_long_release_names_still_fit(chart: helm.Chart) -> None:
    name = "a-very-long-release-name-that-is-close-to-the-limit"
    helm.validate_release_name(name)
    objects = render(chart, None, name=name)
    for obj in objects:
        assert len(obj["metadata"]["name"]) <= 63, obj["metadata"]["name"]
    assert len({o["metadata"]["name"] for o in of_kind(objects, "Deployment").values()}) == len(SERVICES)


def test_disabling_a_service_drops_all_its_objects(chart: helm.Chart) -> None:
    objects = render(chart, {"services": {"transcripts": {"enabled": False}}})
    assert not [o for o in objects if o["metadata"]["name"] == component("transcripts")]
    assert len(of_kind(objects, "Deployment")) == len(SERVICES) - 1


def test_notes_render(chart: helm.Chart) -> None:
    notes = chart.render(None, name=RELEASE, namespace=NAMESPACE)["loopwire/templates/NOTES.txt"]
    assert "kubectl -n agents get pods -l app.kubernetes.io/instance=demo" in notes
    assert "No Anthropic API key is configured" in notes
