"""`loopwire up --workers 2`: two processes share the work, a killed worker is restarted,
SIGTERM stops them all, and a worker whose parent was killed stops itself.

Worker processes are found through /proc (children of the `loopwire up` process whose
command line names `--worker-index`), their metrics on LOOPWIRE_METRICS_PORT + index."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from prometheus_client.parser import text_string_to_metric_families

from loopwire.testing import LoopwireContainer
from tests.bench.procstat import children_of, stat_fields
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import E2E_ENV, connected, serve_tools, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e


def alive(pid: int) -> bool:
    try:
        return stat_fields(pid)[0] not in ("Z", "X")
    except OSError:
        return False


def is_worker(pid: int) -> bool:
    try:
        return b"--worker-index" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def worker_pids(parent: int) -> dict[int, int]:
    """{worker index: pid} of the live worker children of `parent`."""
    found = {}
    for pid in children_of(parent):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
            if "--worker-index" in argv:
                found[int(argv[argv.index("--worker-index") + 1])] = pid
    return found


def http_get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


def wait_until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if value := check():
                return value
        time.sleep(0.1)
    raise TimeoutError(f"{what} after {timeout}s")


def wait_ready(port: int, timeout: float = 30.0) -> None:
    wait_until(lambda: http_get(port, "/readyz")[0] == 200, timeout, f"no 200 from :{port}/readyz")


def received(port: int) -> float:
    """Messages this worker's consumers took (FastStream's counter, all handlers)."""
    _, text = http_get(port, "/metrics")
    return sum(s.value for family in text_string_to_metric_families(text) for s in family.samples
               if s.name == "loopwire_faststream_received_messages_total")


def start_system(fake_anthropic: FakeAnthropic) -> LoopwireContainer:
    env = dict(E2E_ENV, ANTHROPIC_BASE_URL=fake_anthropic.url)
    lw = LoopwireContainer(env=env, services="up --workers 2")
    lw.start()  # returns once worker 0 (the parent) answers /readyz
    try:
        wait_ready(lw.metrics_port + 1)
    except Exception:
        lw.stop()
        raise
    return lw


@pytest.fixture(scope="module")
def workers(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    lw = start_system(fake_anthropic)
    yield lw
    lw.stop()


@pytest.fixture
async def wnc(workers: LoopwireContainer) -> AsyncIterator[NatsClient]:
    async with connected(workers) as client:
        yield client


async def run_session(lw: LoopwireContainer, nc: NatsClient, text: str) -> dict[str, Any]:
    async with SessionEvents(nc, f"workers-{uuid.uuid4().hex[:10]}") as ev:
        await ev.publish("start", {"input": text})
        try:
            return await ev.wait_for("run.ended", timeout=30)
        except TimeoutError:
            raise AssertionError(f"no run.ended for {ev.sid!r}:\n{lw.logs()[-4000:]}") from None


async def test_both_workers_take_work(workers: LoopwireContainer, wnc: NatsClient, fake: FakeAnthropic) -> None:
    assert workers.proc is not None
    assert set(worker_pids(workers.proc.pid)) == {1}, "one child: worker 1"
    ports = [workers.metrics_port, workers.metrics_port + 1]
    before = [await asyncio.to_thread(received, p) for p in ports]
    ended = await asyncio.gather(*(run_session(workers, wnc, f"hello {i}") for i in range(6)))
    assert [e["status"] for e in ended] == ["completed"] * 6
    assert sorted(e["final_text"] for e in ended) == [f"Echo: hello {i}" for i in range(6)]
    after = [await asyncio.to_thread(received, p) for p in ports]
    # ~4 deliveries per session spread at random over the deliver group's two members:
    # that one of them got none of 24 is a one-in-eight-million event.
    taken = [a - b for a, b in zip(after, before, strict=True)]
    assert all(n > 0 for n in taken), f"messages taken per worker: {taken}"
    assert "2 workers" in workers.logs() and f":{ports[1]} (worker 1)" in workers.logs()


async def test_a_killed_worker_is_restarted(workers: LoopwireContainer, wnc: NatsClient,
                                            fake: FakeAnthropic) -> None:
    assert workers.proc is not None
    parent = workers.proc.pid
    old = worker_pids(parent)[1]
    os.kill(old, signal.SIGKILL)
    new = await asyncio.to_thread(
        wait_until, lambda: (pid := worker_pids(parent).get(1)) not in (None, old) and pid, 20,
        "worker 1 was not restarted")
    await asyncio.to_thread(wait_ready, workers.metrics_port + 1)
    assert not alive(old), "the killed worker was reaped"
    assert alive(new) and workers.proc.poll() is None
    assert f"worker 1 (pid {old}) exited with signal SIGKILL" in workers.logs()
    ended = await run_session(workers, wnc, "still there?")
    assert ended["status"] == "completed" and ended["final_text"] == "Echo: still there?"


async def test_runs_held_by_a_worker_killed_mid_run_finish_whole(workers: LoopwireContainer, wnc: NatsClient,
                                                                  fake: FakeAnthropic) -> None:
    # Each worker keeps the runs it took in-process (work chains, shared/runtime/chain.py). Kill
    # one while sixteen runs of four slow tool-turns are going: its runs come back from
    # their chains' root messages (LOOPWIRE_ACK_WAIT_S=3) and finish in either worker,
    # each transcript whole: every tool call once with one result, seqs increasing.
    provider, svc = await serve_tools(wnc)
    provider.slow_delay_s = 0.3
    await wait_for_tools(wnc, {"slow_echo"})
    turns = 4

    def model(body: dict[str, Any]) -> dict[str, Any]:
        done = sum(1 for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
                   for b in m["content"] if b.get("type") == "tool_result")
        if done < turns:
            return {"text": f"step {done}", "tool_use": [{"name": "slow_echo", "input": {"text": f"t{done}"}}]}
        return {"text": "all done"}

    fake.responder = model
    assert workers.proc is not None
    victim = worker_pids(workers.proc.pid)[1]
    sids = [f"killed-{uuid.uuid4().hex[:8]}-{i}" for i in range(16)]
    sessions = [SessionEvents(wnc, sid) for sid in sids]
    try:
        for ev in sessions:
            await ev.__aenter__()
            await ev.publish("start", {"input": "go", "tools": ["slow_echo"]})
        await asyncio.sleep(0.8)  # every run is between its first and its last turn
        os.kill(victim, signal.SIGKILL)
        ended = await asyncio.gather(*(ev.wait_for("run.ended", timeout=60) for ev in sessions))
    finally:
        for ev in sessions:
            await ev.__aexit__(None, None, None)
        await svc.stop()
    assert [(e["status"], e["final_text"]) for e in ended] == [("completed", "all done")] * len(sids)
    call_ids: set[str] = set()
    retracted = 0
    for sid in sids:
        transcript = (await query(wnc, "transcript.get", {"session_id": sid}))["events"]
        seqs = [e["seq"] for e in transcript]
        assert seqs == sorted(set(seqs)), sid
        calls = Counter(e["tool_use_id"] for e in transcript if e["kind"] == "tool.call")
        results = Counter(e["tool_use_id"] for e in transcript if e["kind"] == "tool.result")
        assert len(calls) == turns and calls == results and set(calls.values()) == {1}, sid
        assert [e["kind"] for e in transcript].count("run.ended") == 1, sid
        call_ids |= set(calls)
        retracted += [e["kind"] for e in transcript].count("retracted")
    # Every call reached the provider under its tool_use id; one that ran twice (its result
    # was never recorded before the kill) ran again under the same id.
    runs_of = Counter(headers["Loopwire-Tool-Use-Id"] for name, _, headers in provider.calls if name == "slow_echo")
    assert set(runs_of) == call_ids
    # The killed worker held runs (all sixteen on the other: a 1-in-65536 draw): the
    # steps it had in flight were done again, a tool call run again or a generation
    # retracted and asked again.
    assert sum(n - 1 for n in runs_of.values()) + retracted >= 1, "nothing was recovered"


def test_sigterm_stops_every_worker(workers: LoopwireContainer) -> None:
    assert workers.proc is not None
    children = list(worker_pids(workers.proc.pid).values())
    assert len(children) == 1
    code = workers.terminate(40.0)
    assert code == 0, workers.logs()[-3000:]
    assert not any(alive(pid) for pid in children), "no worker outlives the parent"
    assert "1 worker process(es) stopped" in workers.logs()


def test_a_worker_stops_when_its_parent_is_killed(fake_anthropic: FakeAnthropic) -> None:
    lw = start_system(fake_anthropic)
    try:
        assert lw.proc is not None
        child = worker_pids(lw.proc.pid)[1]
        os.kill(lw.proc.pid, signal.SIGKILL)  # the parent alone, not its group
        lw.proc.wait(timeout=10)
        wait_until(lambda: not alive(child), 30, f"worker pid {child} outlived its parent")
    finally:
        if "child" in locals() and alive(child) and is_worker(child):  # the test failed: clean up
            os.kill(child, signal.SIGKILL)
        lw.stop()
