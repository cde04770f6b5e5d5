"""`loopwire up --workers N` (loopwire/workers.py): the back-off, the ports, the CLI's
validation, and the pool's restart and stop paths with stand-in child programs (the real
workers are tested end to end in tests/e2e/test_workers.py)."""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from loopwire import workers
from loopwire.cli import app
from loopwire.workers import (
    child_argv,
    describe_ports,
    metrics_port,
    next_failures,
    restart_delay,
)


@pytest.mark.unit
def test_restart_delay_doubles_up_to_the_cap() -> None:
    assert [restart_delay(n) for n in range(1, 9)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert restart_delay(10_000) == 30.0, "no overflow after a long crash loop"
    assert restart_delay(3, base_s=0.1, cap_s=0.3) == 0.3
    with pytest.raises(ValueError):
        restart_delay(0)


@pytest.mark.unit
def test_a_worker_that_ran_long_enough_starts_the_back_off_afresh() -> None:
    assert next_failures(0, uptime_s=0.2) == 1
    assert next_failures(4, uptime_s=0.2) == 5
    assert next_failures(4, uptime_s=workers.STABLE_AFTER_S) == 1


@pytest.mark.unit
def test_ports_and_argv() -> None:
    assert [metrics_port(9464, i) for i in range(3)] == [9464, 9465, 9466]
    assert metrics_port(0, 2) == 0, "port 0 (no HTTP server) stays 0 for every worker"
    assert describe_ports(9464, 2) == "metrics on :9464 (worker 0), :9465 (worker 1)"
    assert "no metrics server" in describe_ports(0, 2)
    argv = child_argv(4, 2, 1234)
    assert argv[:4] == [sys.executable, "-m", "loopwire.cli", "up"]
    assert argv[4:] == ["--workers", "4", "--worker-index", "2", "--parent-pid", "1234"]


@pytest.mark.unit
@pytest.mark.parametrize(("args", "env", "message"), [
    (["up", "--workers", "0"], {}, "--workers must be at least 1, got 0"),
    (["up"], {"LOOPWIRE_WORKERS": "0"}, "LOOPWIRE_WORKERS must be at least 1, got 0"),
])
def test_fewer_than_one_worker_is_refused(args: list[str], env: dict[str, str], message: str) -> None:
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 2
    assert message in " ".join(result.output.split())


