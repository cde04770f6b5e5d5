"""promtool over our metrics and rules: `check metrics` on every exposition we serve,
`check rules` and `test rules` on alerts.yml, `check config` on prometheus.yml, and every
dashboard expression compiled as a rule.

promtool comes from Debian's `prometheus` package (`apt-get install prometheus`, see
docs/observability.md). Without it these tests skip locally and fail under CI=true, so a
machine that lost the install step cannot pass silently.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from loopwire.shared.observability import metrics
from loopwire.shared.observability.http_server import start_http_server
from tests.paths import REPO

pytestmark = pytest.mark.unit

ROOT = REPO
PROM = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "loopwire.json"


def find_promtool() -> str:
    found = shutil.which("promtool") or shutil.which("promtool", path=str(Path(sys.executable).parent))
    if found:
        return found
    message = "promtool not found on PATH or in the venv: apt-get install prometheus"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def promtool() -> str:
    return find_promtool()


def run(promtool: str, *args: str, stdin: bytes | None = None, cwd: Path | None = None) -> str:
    out = subprocess.run([promtool, *args], input=stdin, capture_output=True, cwd=cwd, timeout=60)
    text = (out.stdout + out.stderr).decode()
    assert out.returncode == 0, f"promtool {' '.join(args)} failed:\n{text}"
    return text


def touch_every_metric() -> None:
    """Give every labelled metric a child and every metric a value, so the exposition
    has a sample of each family (an untouched labelled family shows only HELP/TYPE)."""
    for m in metrics.ALL_METRICS:
        child = m.labels(*["promtool"] * len(m._labelnames)) if m._labelnames else m
        if m._type == "histogram":
            child.observe(0.3)
        elif m._type == "gauge":
            child.set(1)
        else:
            child.inc()


def test_check_metrics_on_every_family(promtool: str) -> None:
    touch_every_metric()
    text = metrics.metrics_text()
    for m in metrics.ALL_METRICS:
        assert f"\n{m._name}".encode() in text, m._name
    # promtool prints lint problems and exits non-zero; a clean run prints nothing.
    assert run(promtool, "check", "metrics", stdin=text).strip() == ""


async def test_check_metrics_on_the_served_endpoint(promtool: str) -> None:
    """What Prometheus would scrape from /metrics, byte for byte."""
    touch_every_metric()
    handle = await start_http_server("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", handle.port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        await writer.wait_closed()
    finally:
        await handle.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"loopwire_llm_time_to_first_token_seconds_bucket" in body
    assert run(promtool, "check", "metrics", stdin=body).strip() == ""


def test_check_rules(promtool: str) -> None:
    out = run(promtool, "check", "rules", str(PROM / "alerts.yml"))
    assert "SUCCESS" in out


def test_alert_rules_fire_as_intended(promtool: str) -> None:
    """alerts_test.yml feeds series to each alert and states when it fires."""
    out = run(promtool, "test", "rules", "alerts_test.yml", cwd=PROM)
    assert "SUCCESS" in out


def test_check_prometheus_config(promtool: str) -> None:
    out = run(promtool, "check", "config", str(PROM / "prometheus.yml"))
    assert "SUCCESS" in out


def test_dashboard_queries_compile(promtool: str, tmp_path: Path) -> None:
    """Each panel expression, with Grafana's $__rate_interval filled in, as a recording rule."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 20
    rules = [{"record": f"loopwire:dashboard_check:{i}", "expr": e.replace("$__rate_interval", "5m")}
             for i, e in enumerate(exprs)]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = run(promtool, "check", "rules", str(path))
    assert f"{len(rules)} rules found" in out
