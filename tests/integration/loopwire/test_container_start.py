"""A LoopwireContainer whose start fails stops what it started: `with` never reaches
`__exit__` then, and no loopwire process, nats-server or redis-server may be left behind
(on a shared machine they were, one layout of six processes per failed start)."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from loopwire.testing import LoopwireContainer
from loopwire.testing.processes import PORT_TAKEN


def test_a_start_that_fails_leaves_nothing_running() -> None:
    system = LoopwireContainer(use_docker=False, layout="split", ready_timeout=0.2)
    with pytest.raises(TimeoutError, match="not ready"):
        with system:
            pytest.fail("a layout of six processes cannot be ready within 0.2 s")
    assert system.processes and not any(process.running for process in system.processes)
    for server in (system.nats, system.redis):
        assert server is not None and server.proc is not None and server.proc.poll() is not None


def test_a_metrics_port_taken_before_the_bind_is_picked_again() -> None:
    """Parallel test workers pick free ports at once: a process whose /metrics port was
    taken between its pick and its bind starts again on another, instead of never
    answering /readyz."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        system = LoopwireContainer(use_docker=False, layout="up")
        process = system.processes[0]
        process.metrics_port = port
        with system:
            assert process.metrics_port != port
            assert PORT_TAKEN not in process.logs()
            with urllib.request.urlopen(f"http://127.0.0.1:{process.metrics_port}/readyz", timeout=5) as resp:
                assert resp.status == 200
