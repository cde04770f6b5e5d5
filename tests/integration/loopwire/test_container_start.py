"""A LoopwireContainer whose start fails stops what it started: `with` never reaches
`__exit__` then, and no loopwire process, nats-server or redis-server may be left behind
(on a shared machine they were, one layout of six processes per failed start)."""

from __future__ import annotations

import pytest

from loopwire.testing import LoopwireContainer


def test_a_start_that_fails_leaves_nothing_running() -> None:
    system = LoopwireContainer(use_docker=False, layout="split", ready_timeout=0.2)
    with pytest.raises(TimeoutError, match="not ready"):
        with system:
            pytest.fail("a layout of six processes cannot be ready within 0.2 s")
    assert system.processes and not any(process.running for process in system.processes)
    for server in (system.nats, system.redis):
        assert server is not None and server.proc is not None and server.proc.poll() is not None
