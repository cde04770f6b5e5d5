"""The chart's Redis layouts (values `redis.mode`): a Redis Cluster and a master behind
Sentinel render the settings loopwire reads for them, and those settings make the layout
loopwire connects to (shared/runtime/credentials.py)."""

from __future__ import annotations

from typing import Any

import helm_python as helm
import pytest

from loopwire.settings import Settings
from loopwire.shared.runtime.credentials import redis_topology, wait_replicas
from tests.unit.deploy.chart import env_of, of_kind, render

REDIS_LAYOUT = ("LOOPWIRE_REDIS_CLUSTER", "LOOPWIRE_REDIS_SENTINELS", "LOOPWIRE_REDIS_SENTINEL_MASTER",
                "LOOPWIRE_REDIS_WAIT_REPLICAS")


def config_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    (cm,) = of_kind(objects, "ConfigMap").values()
    return dict(cm["data"])


def settings_of(data: dict[str, str]) -> Settings:
    return Settings(**{k.removeprefix("LOOPWIRE_").lower(): v for k, v in data.items() if k.startswith("LOOPWIRE_REDIS")})


def test_standalone_names_no_layout(rendered: dict[str, list[dict[str, Any]]]) -> None:
    data = config_of(rendered["default"])
    assert not set(REDIS_LAYOUT) & set(data)
    assert wait_replicas(settings_of(data)) == 0


def test_a_redis_cluster(rendered: dict[str, list[dict[str, Any]]]) -> None:
    data = config_of(rendered["redis-cluster"])
    assert data["LOOPWIRE_REDIS_CLUSTER"] == "true" and "LOOPWIRE_REDIS_SENTINELS" not in data
    settings = settings_of(data)
    assert redis_topology(settings).cluster and wait_replicas(settings) == 1
    for deployment in of_kind(rendered["redis-cluster"], "Deployment").values():
        assert env_of(deployment)["LOOPWIRE_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "redis-cluster"


def test_a_master_behind_sentinels(rendered: dict[str, list[dict[str, Any]]]) -> None:
    data = config_of(rendered["redis-sentinel"])
    assert data["LOOPWIRE_REDIS_SENTINEL_MASTER"] == "mymaster" and data["LOOPWIRE_REDIS_WAIT_REPLICAS"] == "1"
    topology = redis_topology(settings_of(data))
    assert [port for _, port in topology.sentinels] == [26379] * 3 and topology.sentinel_master == "mymaster"
    assert not any("PASSWORD" in k for k in data), "passwords come from Secrets, never the ConfigMap"
    for deployment in of_kind(rendered["redis-sentinel"], "Deployment").values():
        env = env_of(deployment)
        assert env["LOOPWIRE_REDIS_SENTINEL_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "redis", "key": "redis-password"}


def test_sentinel_mode_without_sentinels_is_refused(chart: helm.Chart) -> None:
    with pytest.raises(Exception, match="redis.sentinel.hosts"):
        render(chart, {"redis": {"mode": "sentinel"}})
