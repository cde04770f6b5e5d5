"""What the chart's default install holds: the objects, replicas and commands, locked-down
pods, the executors' image, probes, labels, a config map without secrets; and what it holds
on the NATS chart's three-node cluster."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.paths import REPO
from tests.unit.deploy.chart import (
    RELEASE,
    SCENARIOS,
    SERVICES,
    component,
    container,
    of_kind,
    render,
)

pytestmark = pytest.mark.unit


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
        assert container(dep)["image"] == "loopwire:0.2.0"
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
    assert c["image"] == "registry.example/loopwire:0.2.0-agents"
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
        assert other["image"] == "loopwire:0.2.0"
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
    assert default_llm["image"] == "loopwire:0.2.0"
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
        assert labels["app.kubernetes.io/version"] == "0.2.0"
        assert labels["helm.sh/chart"] == "loopwire-0.2.0"
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


def test_on_the_nats_charts_cluster_every_node_and_three_replicas(
        rendered: dict[str, list[dict[str, Any]]]) -> None:
    """ci/nats-cluster-values.yaml names the three pods deploy/nats/nats-chart-values.yaml
    makes (the official NATS chart's StatefulSet `nats` behind the headless Service
    `nats-headless`), and every stream goes on all three."""
    (cm,) = of_kind(rendered["nats-cluster"], "ConfigMap").values()
    urls = cm["data"]["LOOPWIRE_NATS_URL"].split(",")
    assert urls == [f"nats://nats-{n}.nats-headless.nats.svc.cluster.local:4222" for n in range(3)]
    assert cm["data"]["LOOPWIRE_STREAM_REPLICAS"] == "3"
    nats_chart = yaml.safe_load((REPO / "deploy" / "nats" / "nats-chart-values.yaml").read_text())
    cluster, jetstream = nats_chart["config"]["cluster"], nats_chart["config"]["jetstream"]
    assert cluster["enabled"] is True and cluster["replicas"] == len(urls)
    assert jetstream["enabled"] is True and jetstream["fileStore"]["pvc"]["size"]
    assert jetstream["merge"]["sync_interval"] == "always"
