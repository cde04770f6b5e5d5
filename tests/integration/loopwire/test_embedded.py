"""The embedded servers of `loopwire up --embedded` (loopwire/embedded.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from loopwire.embedded import ensure_servers
from loopwire.settings import Settings
from loopwire.testing.servers import free_port


@pytest.mark.integration
def test_embedded_servers_write_only_under_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing lands in the working directory (a stray redis.log once did): data, config
    and logs of both servers go under LOOPWIRE_DATA_DIR."""
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("LOOPWIRE_DATA_DIR", str(tmp_path / "data"))
    settings = Settings(nats_url=f"nats://127.0.0.1:{free_port()}", redis_url=f"redis://127.0.0.1:{free_port()}/0")
    servers = ensure_servers(settings.nats_url, settings.redis_url, settings.data_dir)
    try:
        assert len(servers.procs) == 2
    finally:
        servers.stop()
    assert os.listdir(cwd) == []
    written = {p.name for p in (tmp_path / "data").iterdir()}
    assert {"nats", "redis", "nats.conf", "nats.log", "redis.log"} <= written
