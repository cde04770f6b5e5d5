"""The chart's autoscaling, disruption budgets and monitoring: the Prometheus Operator kinds
(ServiceMonitor, PrometheusRule, CRDs kubernetes-validate has no schema for) checked
structurally; long release names, disabled services, the notes."""

from __future__ import annotations

import re
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.unit.deploy.chart import (
    CRD_GROUP,
    NAMESPACE,
    RELEASE,
    ROOT,
    SERVICES,
    component,
    of_kind,
    render,
)

pytestmark = pytest.mark.unit


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
