"""The Helm chart as the chart tests see it: its scenarios, rendered offline, and accessors
of the rendered objects (the fixtures are in conftest.py).

helm-python-sdk (``import helm_python``) binds Helm 4's Go SDK through a bundled shared
library, so lint and render here are the real Helm code paths, with no ``helm`` binary and
no cluster.
"""

from __future__ import annotations

from typing import Any

import helm_python as helm
import yaml

from tests.paths import REPO

ROOT = REPO
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
    "nats-cluster": CHART / "ci" / "nats-cluster-values.yaml",
    "redis-cluster": CHART / "ci" / "redis-cluster-values.yaml",
    "redis-sentinel": CHART / "ci" / "redis-sentinel-values.yaml",
}


def load_values(name: str) -> dict[str, Any] | None:
    path = SCENARIOS[name]
    return None if path is None else yaml.safe_load(path.read_text())


def render(chart: helm.Chart, values: dict[str, Any] | None, name: str = RELEASE) -> list[dict[str, Any]]:
    """All rendered objects (NOTES.txt is text, not a manifest)."""
    out = chart.render(values, name=name, namespace=NAMESPACE)
    objects = []
    for template, text in sorted(out.items()):
        if template.endswith("NOTES.txt"):
            continue
        objects.extend(doc for doc in yaml.safe_load_all(text) if doc)
    return objects


def of_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def component(name: str) -> str:
    return f"{RELEASE}-loopwire-{name}"


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    (only,) = deployment["spec"]["template"]["spec"]["containers"]
    return only


def env_of(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container(deployment).get("env", [])}
