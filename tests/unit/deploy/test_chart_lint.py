"""The Helm chart, checked offline: lint, and every rendered object valid against the
Kubernetes 1.30 strict schemas (unknown fields fail); values.yaml against its schema."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.unit.deploy.chart import (
    CHART,
    CRD_GROUP,
    KUBE_VERSION,
    NAMESPACE,
    SCENARIOS,
    load_values,
)

pytestmark = pytest.mark.unit


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
        {"nats": {"url": "nats://n0:4222,n1:4222"}},  # every server of a list needs its scheme
        {"nats": {"url": "nats://n0:4222, nats://n1:4222"}},
        {"image": {"pullPolicy": "Sometimes"}},
        {"executors": {"enabled": "yes"}},
        {"executors": {"mountPath": "relative/dir"}},
        {"executors": {"image": {"name": "x"}}},
        {"serviceDefaults": {"autoscaling": {"targetCPUUtilizationPercentage": 150}}},
        {"redis": {"mode": "replicated"}},
        {"redis": {"sentinel": {"hosts": ["no-port"]}}},
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
