"""The monitoring configs parse and speak only of metrics shared/observability/metrics.py defines."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from loopwire.shared.observability import metrics
from tests.paths import REPO

pytestmark = pytest.mark.unit

ROOT = REPO
DEPLOY = ROOT / "deploy"
METRIC_REF = re.compile(r"\bloopwire_[a-z0-9_]*[a-z0-9]")
SERVICES = ("router", "llm", "tools", "memory", "transcripts")


def series_names() -> set[str]:
    """Every series name our metrics expose (counters get _total, histograms three series)."""
    names: set[str] = set()
    for m in metrics.ALL_METRICS:
        if m._type == "counter":
            names.add(f"{m._name}_total")
        elif m._type == "histogram":
            names |= {f"{m._name}_bucket", f"{m._name}_sum", f"{m._name}_count"}
        else:
            names.add(m._name)
    return names


def referenced(text: str) -> set[str]:
    # Recording-rule style names (loopwire:...) and label values are not metric references.
    return set(METRIC_REF.findall(text))


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def test_dashboard_parses_and_uses_only_our_metrics() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "loopwire.json").read_text())
    assert dashboard["uid"] and dashboard["title"]
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = set().union(*(referenced(e) for e in exprs))
    assert used - series_names() == set()
    # The panels the dashboard promises are there.
    for needed in ("loopwire_runs_started_total", "loopwire_turns_total", "loopwire_tokens_total",
                   "loopwire_cost_usd_total", "loopwire_model_fallbacks_total", "loopwire_circuit_breaker_state",
                   "loopwire_tool_call_duration_seconds_bucket",
                   "loopwire_llm_time_to_first_token_seconds_bucket", "loopwire_jetstream_consumer_pending"):
        assert needed in used, needed
    assert any("histogram_quantile(0.99" in e and "tool_call_duration" in e for e in exprs)
    assert any("histogram_quantile(0.5" in e and "tool_call_duration" in e for e in exprs)
    # Panels do not overlap and every one has a data source.
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["type"] == "prometheus"


def test_alerts_use_only_our_metrics() -> None:
    rules = load_yaml(DEPLOY / "prometheus" / "alerts.yml")
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    used = set().union(*(referenced(e) for e in exprs))
    assert used - series_names() == set()
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    assert {"LoopwireBudgetExhaustionRate", "LoopwireLoopTerminations", "LoopwireModelFallbackSpike",
            "LoopwireCircuitBreakerOpen", "LoopwireConsumerLag", "LoopwireRedeliveryStorm",
            "LoopwireErrorRate"} <= names


def test_prometheus_scrapes_the_five_services() -> None:
    config = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    assert config["rule_files"] == ["alerts.yml"]
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "loopwire"]
    targets = {t for sc in job["static_configs"] for t in sc["targets"]}
    assert targets == {f"{s}:9464" for s in SERVICES}
    # A `service` target label would clash with loopwire_steps_total{service}.
    assert all("service" not in sc.get("labels", {}) for sc in job["static_configs"])


def test_grafana_provisioning() -> None:
    ds = load_yaml(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    by_uid = {d["uid"]: d for d in ds["datasources"]}
    prom = by_uid["prometheus"]  # the dashboard's default data source
    assert prom["type"] == "prometheus" and prom["url"] == "http://prometheus:9090" and prom["isDefault"]
    assert by_uid["jaeger"]["url"] == "http://jaeger:16686"
    dash = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "loopwire.yml")
    [provider] = dash["providers"]
    assert provider["type"] == "file" and provider["options"]["path"]


def test_collector_pipeline_is_complete_and_redacts() -> None:
    config = load_yaml(DEPLOY / "otel-collector" / "config.yaml")
    traces = config["service"]["pipelines"]["traces"]
    for kind, names in (("receivers", traces["receivers"]), ("processors", traces["processors"]),
                        ("exporters", traces["exporters"])):
        for name in names:
            assert name in config[kind], f"{kind} {name} is used but not defined"
    for ext in config["service"].get("extensions", []):
        assert ext in config["extensions"]

    protocols = config["receivers"]["otlp"]["protocols"]
    assert set(protocols) == {"grpc", "http"}
    assert config["exporters"]["otlp/jaeger"]["endpoint"] == "jaeger:4317"
    assert "debug" in traces["exporters"]
    # batch last; content dropped and keys masked before anything leaves.
    assert traces["processors"][-1] == "batch"
    assert traces["processors"][0] == "memory_limiter"
    dropped = {a["key"] for a in config["processors"]["attributes/drop_gen_ai_content"]["actions"]
               if a["action"] == "delete"}
    assert {"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
            "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} <= dropped
    blocked = config["processors"]["redaction"]["blocked_values"]
    assert any(re.search(p, "sk-ant-api03-abcdefgh") for p in blocked)
    assert any(re.search(p, "Bearer abc.def") for p in blocked)
    assert any(re.search(p, "api_key=abc") for p in blocked)
    assert not any(re.search(p, "max_tokens: 4096") for p in blocked)


def test_docs_list_every_metric_and_no_other() -> None:
    doc = (ROOT / "docs" / "observability.md").read_text()
    table = {line.split("`")[1] for line in doc.splitlines() if line.startswith("| `loopwire_")}
    exposed = {m._name + ("_total" if m._type == "counter" else "") for m in metrics.ALL_METRICS}
    assert table == exposed
    assert referenced(doc) - series_names() - {m._name for m in metrics.ALL_METRICS} - faststream_names() == set()


def faststream_names() -> set[str]:
    """The message-level metrics of FastStream's middleware (shared/observability/message_metrics.py),
    with their exposition suffixes."""
    from loopwire.shared.observability.message_metrics import message_metrics_middleware

    message_metrics_middleware()  # registers its metrics in metrics.REGISTRY
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        if family.name.startswith("loopwire_faststream_"):
            names |= {family.name, family.name + "_total"} | {s.name for s in family.samples}
    return names
