"""What an idle `loopwire serve NAME` process costs, and how soon a new one serves.

- **RSS and idle CPU** of every process of a split layout, over an idle window: once after
  it started, once after the load (`idle_facts`).
- **Ready**: a service's processes are stopped, the work only it can take is left waiting
  (a `start` for the router; a run stalled at its hop for memory and llm), then one
  `loopwire serve NAME` is started, and the time from its exec to the first sign that it
  handled that work is taken (`run.started`, `generating`); for transcripts, from its exec
  to the first `session.get` it answers; for tools, to the first `tools.list` that offers
  the tool, its catalog published (with no tools process up nothing offers it, so no run
  waits on it), then a run's call is answered (`time_to_ready`). Every restart of a pod is
  that long a gap for what its replicas serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import nats
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg

from loopwire.shared.contract.subjects import Subjects

from .layouts import System
from .procstat import cpu_seconds

IDLE_WINDOW_S = 5.0
READY_TIMEOUT_S = 120.0
SIGN_OF_WORK = {"router": "run.started", "memory": "generating", "llm": "generating"}
"""The event that shows a restarted service handled the work waiting for it (memory's
hop is followed by the llm's `generating` a few milliseconds later)."""
STALLED_AT = {"memory": "run.started", "llm": "run.started"}
"""The event after which a run waits on the stopped service. A run cannot wait on the tools
service: with no tools process up, nothing offers its tools (shared/stores/tool_catalog.py),
so a new tools process is ready once its catalog offers the tool (`_first_listing`)."""


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` in MB (VmRSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def idle_facts(pids: dict[str, int], window_s: float = IDLE_WINDOW_S) -> dict[str, dict[str, float]]:
    """label -> RSS (MB, at the window's end) and the share of one core used over an idle
    window of `window_s`."""
    before = {label: cpu_seconds(pid) for label, pid in pids.items()}
    t0 = time.monotonic()
    await asyncio.sleep(window_s)
    wall = time.monotonic() - t0
    return {label: {"rss_mb": rss_mb(pid), "idle_cpu_share": (cpu_seconds(pid) - before[label]) / wall}
            for label, pid in pids.items()}


class _SessionEvents:
    """The arrival time of each event kind of one session (core NATS, as published)."""

    def __init__(self, nc: NatsClient, subjects: Subjects, sid: str) -> None:
        self.nc, self.subjects, self.sid = nc, subjects, sid
        self.seen: dict[str, float] = {}
        self.ended: asyncio.Event = asyncio.Event()
        self._sub: Any = None

    async def __aenter__(self) -> _SessionEvents:
        head = len(self.subjects.event(self.sid, ""))

        async def on_event(msg: Msg) -> None:
            kind = msg.subject[head:]
            self.seen.setdefault(kind, time.monotonic())
            if kind == "run.ended":
                self.ended.set()

        self._sub = await self.nc.subscribe(self.subjects.session_events(self.sid), cb=on_event)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._sub.unsubscribe()

    async def wait_for(self, kind: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while kind not in self.seen:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {kind} of {self.sid} within {timeout:.0f}s")
            await asyncio.sleep(0.005)
        return self.seen[kind]


async def _start(nc: NatsClient, subjects: Subjects, sid: str, tool: str) -> None:
    body = {"v": 1, "input": "bench:1", "tools": [tool], "limits": {"max_turns": 10}}
    reply = await nc.request(subjects.ingress(sid, "start"), orjson.dumps(body), timeout=30,
                             headers={"Nats-Msg-Id": f"{sid}:start"})
    if "error" in orjson.loads(reply.data):
        raise RuntimeError(f"ingress refused the start of {sid}: {reply.data!r}")


async def _first_answer(nc: NatsClient, subjects: Subjects, sid: str, timeout: float) -> float:
    """The moment the first `session.get` for `sid` is answered (by anyone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            await nc.request(subjects.session_get, orjson.dumps({"session_id": sid}), timeout=0.25)
            return time.monotonic()
        await asyncio.sleep(0.01)
    raise TimeoutError(f"no session.get answered within {timeout:.0f}s")


async def _first_listing(nc: NatsClient, subjects: Subjects, tool: str, timeout: float) -> float:
    """The moment `tools.list` first answers with `tool` on offer: a tools process's first
    discovery round done and its catalog published."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            reply = await nc.request(subjects.tools_list, b"{}", timeout=0.25)
            if any(t.get("name") == tool for t in orjson.loads(reply.data).get("tools", [])):
                return time.monotonic()
        await asyncio.sleep(0.01)
    raise TimeoutError(f"no tools.list offered {tool} within {timeout:.0f}s")


async def time_to_ready(system: System, nc: NatsClient, service: str, *, prefix: str = "loopwire",
                        tool: str = "noop") -> float:
    """Seconds from the exec of a new `loopwire serve <service>` to its first query or work
    message handled, with the service's other processes stopped (see the module's doc).
    Every process of the layout is running again on return."""
    subjects = Subjects(prefix)
    processes = system.part.of_service(service)
    for process in processes:
        process.stop()
    sid = f"bench-ready-{service}-{uuid.uuid4().hex[:8]}"
    try:
        async with _SessionEvents(nc, subjects, sid) as events:
            if service in STALLED_AT:
                await _start(nc, subjects, sid, tool)
                await events.wait_for(STALLED_AT[service], 30)
            elif service == "router":
                await _start(nc, subjects, sid, tool)
            exec_at = time.monotonic()
            processes[0].launch(system.part.process_env())
            if service == "transcripts":
                done_at = await _first_answer(nc, subjects, sid, READY_TIMEOUT_S)
            elif service == "tools":
                done_at = await _first_listing(nc, subjects, tool, READY_TIMEOUT_S)
                await _start(nc, subjects, sid, tool)  # and its tool runs: a run's call answered
                await events.wait_for("tool.result", 30)
            else:
                done_at = await events.wait_for(SIGN_OF_WORK[service], READY_TIMEOUT_S)
            if service != "transcripts":
                await asyncio.wait_for(events.ended.wait(), 60)
    finally:
        await asyncio.to_thread(system.part.start_loopwire)  # the others, and any left stopped
    return done_at - exec_at


READY_ORDER = ("transcripts", "router", "memory", "llm", "tools")


async def ready_times(system: System, nats_url: str, services: tuple[str, ...] = READY_ORDER) -> dict[str, float]:
    """`time_to_ready` of each service of a split layout, one after the other."""
    nc = await nats.connect(servers=nats_url.split(","))
    try:
        return {service: await time_to_ready(system, nc, service) for service in services}
    finally:
        await nc.drain()
