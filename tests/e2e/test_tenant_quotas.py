"""Tenant limits (LOOPWIRE_TENANT_LIMITS) end to end, in the deployed layout: one `loopwire
serve` process per service and two routers, driven through the public contract with
plain nats-py.

- a tenant with `max_running: 1` queues its second start (`run.queued`, status `queued`
  in session.get, the sessions list, `loopwire sessions`) and runs it when the first
  ends, while another tenant starts at once; beyond `max_queued` a start is refused;
- `abort` on a queued session ends it `aborted` and the next one in line starts;
- a spent token allowance refuses the next start, and a run that crosses it converges
  (`budget_exhausted`, `tenant_quota`);
- `tenant.usage` and the routers' metrics match the runs (an unpriced model counts its
  tokens and says so once);
- kill -9 of a router while a tenant's runs are queued, running and ending: no run holds
  a slot twice, none is lost, every queued run starts, and the counts end at zero.

Runs are held on a tool of this module's own (`hold`), which answers when the test says.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from nats import micro
from nats.aio.client import Client as NatsClient

from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .cli_driver import cli_env
from .conftest import across, connected, started_system, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e

LIMITS = {
    "acme": {"max_running": 1, "max_queued": 1},
    "initech": {"max_running": 1, "max_queued": 3},
    "tok": {"tokens_per_day": 300},
    "conv": {"tokens_per_day": 300},
    "meter": {"tokens_per_day": 1_000_000, "usd_per_day": 100.0},
    "crash": {"max_running": 2, "max_queued": 20},
    "*": {},
}
PRICED, UNPRICED = "claude-sonnet-4-5", "meter-own-model"


class Holds:
    """The `hold` tool: each call waits until the test releases its key; counts the calls
    in progress at once (a slot given twice would show as one more)."""

    def __init__(self) -> None:
        self.gates: dict[str, asyncio.Event] = {}
        self.started: dict[str, int] = {}
        self.active = 0
        self.most_active = 0
        self.changed = asyncio.Condition()
        self.tasks: set[asyncio.Task[None]] = set()

    def gate(self, key: str) -> asyncio.Event:
        return self.gates.setdefault(key, asyncio.Event())

    async def handle(self, req: micro.Request) -> None:
        # An endpoint's requests are handled one after the other: each call waits in a task.
        self.tasks.add(asyncio.create_task(self._answer(req)))

    async def _answer(self, req: micro.Request) -> None:
        key = json.loads(req.data)["key"]
        async with self.changed:
            self.started[key] = self.started.get(key, 0) + 1
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.changed.notify_all()
        try:
            await asyncio.wait_for(self.gate(key).wait(), 25)
        finally:
            async with self.changed:
                self.active -= 1
        await req.respond(json.dumps({"content": f"released {key}", "is_error": False}).encode())

    async def wait_started(self, *keys: str, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(lambda: all(k in self.started for k in keys))

    async def held(self, count: int, timeout: float = 60) -> list[str]:
        """Once `count` calls are held (started, not released): their keys."""
        def holding() -> list[str]:
            return sorted(k for k in self.started if not self.gate(k).is_set())

        async with asyncio.timeout(timeout), self.changed:
            await self.changed.wait_for(lambda: len(holding()) >= count)
        return holding()


def last_user(body: dict[str, Any]) -> tuple[str, bool]:
    """(the text of the last user message, whether it carries tool results)."""
    for message in reversed(body.get("messages", [])):
        if message["role"] != "user":
            continue
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        return " ".join(texts).strip(), any(b.get("type") == "tool_result" for b in blocks)
    return "", False


def responder(body: dict[str, Any]) -> dict[str, Any] | None:
    """`hold K`: call hold(K), then answer; `spend`: an answer of 350 tokens; `spend, add`:
    a call of 350 tokens, then an answer (the converging one when the day is spent)."""
    text, results = last_user(body)
    tools = [t["name"] for t in body.get("tools") or []]
    if results:
        return {"text": f"done; offered {sorted(tools)}"}
    if text.startswith("hold "):
        return {"tool_use": [{"name": "hold", "input": {"key": text[5:]}}]}
    if text == "spend":
        return {"text": "spent", "usage": {"input_tokens": 250, "output_tokens": 100}}
    if text == "spend, add":
        return {"tool_use": [{"name": "add", "input": {"a": 1, "b": 2}}],
                "usage": {"input_tokens": 250, "output_tokens": 100}}
    return None


@pytest.fixture(scope="module")
def quota_system(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    with started_system(fake_anthropic, layout="split", LOOPWIRE_TENANTS="true",
                        LOOPWIRE_TENANT_LIMITS=json.dumps(LIMITS), LOOPWIRE_TENANT_SWEEP_S="1",
                        LOOPWIRE_TENANT_METRICS_LABELS="6") as lw:
        yield lw


@pytest.fixture
async def holds(quota_system: LoopwireContainer, fake: FakeAnthropic) -> AsyncIterator[Holds]:
    fake.responder = responder
    async with connected(quota_system) as nc:
        held = Holds()
        svc = await micro.add_service(nc, name="quota-tools", version="1.0.0")
        schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
        await svc.add_endpoint(name="hold", handler=held.handle, metadata={
            "loopwire.tool": "hold", "description": "Wait until released.", "input_schema": json.dumps(schema)})

        async def add(req: micro.Request) -> None:
            body = json.loads(req.data)
            await req.respond(json.dumps({"content": str(body["a"] + body["b"]), "is_error": False}).encode())

        await svc.add_endpoint(name="add", handler=add, metadata={
            "loopwire.tool": "add", "description": "Add two numbers.", "input_schema": json.dumps(
                {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}})})
        await wait_for_tools(nc, {"hold", "add"})
        yield held
        for gate in held.gates.values():
            gate.set()
        await asyncio.gather(*held.tasks, return_exceptions=True)
        await svc.stop()
    fake.responder = None


def sid(tenant: str, name: str) -> str:
    return f"{tenant}.{name}-{uuid.uuid4().hex[:6]}"


async def start(ev: SessionEvents, text: str, **body: Any) -> None:
    tools = ["hold"] if text.startswith("hold ") else body.pop("tools", [])
    await ev.publish("start", {"input": text, "tools": tools, **body})


async def usage_of(nc: NatsClient, tenant: str) -> dict[str, Any]:
    return await query(nc, "tenant.usage", {"tenant": tenant})


async def settles_to(nc: NatsClient, tenant: str, running: int, queued: int, timeout: float = 20) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        usage = await usage_of(nc, tenant)
        if (usage["running"], usage["queued"]) == (running, queued):
            return usage
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{tenant}: {usage}, expected running {running}, queued {queued}")
        await asyncio.sleep(0.2)


@pytest.mark.timeout(180)
async def test_a_second_start_queues_and_runs_after_the_first_while_another_tenant_starts(
        quota_system: LoopwireContainer, holds: Holds) -> None:
    async with connected(quota_system) as nc:
        first, second, third, other = sid("acme", "a"), sid("acme", "b"), sid("acme", "c"), sid("globex", "g")
        async with SessionEvents(nc, first) as ev1, SessionEvents(nc, second) as ev2, \
                SessionEvents(nc, third) as ev3, SessionEvents(nc, other) as ev4:
            await start(ev1, "hold k-acme")
            await holds.wait_started("k-acme")
            await start(ev2, "hi from b")
            queued = await ev2.wait_for("run.queued")
            assert queued["position"] == 1 and not ev2.of("run.started")
            got = await query(nc, "session.get", {"session_id": second})
            assert (got["status"], got["phase"], got["activity"]) == ("queued", None, "queued")
            listed = await query(nc, "acme.sessions.list", {"status": "queued"})
            assert second in [s["session_id"] for s in listed["sessions"]]
            cli = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "loopwire.cli", "sessions", "--status", "queued", "--json",
                env={**cli_env(quota_system.get_nats_url()), "LOOPWIRE_TENANT": "acme"},
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(cli.communicate(), 30)
            rows = [json.loads(line) for line in out.decode().splitlines()]
            assert cli.returncode == 0, err.decode()
            assert [(r["session_id"], r["status"]) for r in rows if r["session_id"] == second] == \
                [(second, "queued")], (rows, err.decode())

            # another tenant's start does not wait behind acme's queue
            await start(ev4, "hi from globex")
            assert (await ev4.wait_for("run.ended"))["status"] == "completed"
            assert (await query(nc, "session.get", {"session_id": second}))["status"] == "queued"

            # max_queued 1: a third start is refused, and no run starts
            await start(ev3, "hi from c")
            refused = await ev3.wait_for("error")
            assert (refused["code"], refused["limit"]) == ("quota_exceeded", "max_queued")
            await settles_to(nc, "acme", running=1, queued=1)

            holds.gate("k-acme").set()
            ended = await ev1.wait_for("run.ended")
            started = await ev2.wait_for("run.started", timeout=30)
            assert started["ts"] >= ended["ts"], "it started once the slot freed"
            assert (await ev2.wait_for("run.ended"))["status"] == "completed"
            assert not [e for e in ev3.events if e["kind"] in ("run.started", "run.queued", "run.ended")]
            for ev in (ev1, ev2, ev3, ev4):
                ev.check_bodies()
        usage = await settles_to(nc, "acme", running=0, queued=0)
        assert usage["limits"] == {"max_running": 1, "max_queued": 1}


@pytest.mark.timeout(180)
async def test_abort_of_a_queued_session_dequeues_it(quota_system: LoopwireContainer, holds: Holds) -> None:
    async with connected(quota_system) as nc:
        running, left, next_one = sid("initech", "r"), sid("initech", "l"), sid("initech", "n")
        async with SessionEvents(nc, running) as ev1, SessionEvents(nc, left) as ev2, \
                SessionEvents(nc, next_one) as ev3:
            await start(ev1, "hold k-initech")
            await holds.wait_started("k-initech")
            await start(ev2, "hi from l")
            assert (await ev2.wait_for("run.queued"))["position"] == 1
            await start(ev3, "hi from n")
            assert (await ev3.wait_for("run.queued"))["position"] == 2
            await ev2.publish("abort", {"reason": "changed my mind"})
            aborted = await ev2.wait_for("run.ended")
            assert (aborted["status"], aborted["reason"], aborted["turns"]) == ("aborted", "changed my mind", 0)
            assert (await query(nc, "session.get", {"session_id": left}))["status"] == "idle"
            await settles_to(nc, "initech", running=1, queued=1)
            holds.gate("k-initech").set()
            assert (await ev3.wait_for("run.ended", timeout=30))["status"] == "completed"
            assert not ev2.of("run.started"), "the aborted start never ran"
        await settles_to(nc, "initech", running=0, queued=0)


@pytest.mark.timeout(180)
async def test_a_spent_token_allowance_refuses_the_next_start_and_converges_a_run(
        quota_system: LoopwireContainer, holds: Holds, fake: FakeAnthropic) -> None:
    async with connected(quota_system) as nc:
        first, second = sid("tok", "a"), sid("tok", "b")
        async with SessionEvents(nc, first) as ev1, SessionEvents(nc, second) as ev2:
            await start(ev1, "spend")
            assert (await ev1.wait_for("run.ended"))["status"] == "completed"
            assert (await usage_of(nc, "tok"))["tokens_today"] >= 300
            await start(ev2, "hi again")
            refused = await ev2.wait_for("error")
            assert (refused["code"], refused["limit"]) == ("quota_exceeded", "tokens_per_day")
            await asyncio.sleep(0.5)
            assert not [e for e in ev2.events if e["kind"].startswith("run.")], "no run starts"

        crossing = sid("conv", "a")
        async with SessionEvents(nc, crossing) as ev:
            await start(ev, "spend, add", tools=["add"])
            ended = await ev.wait_for("run.ended", timeout=30)
        assert (ended["status"], ended["reason"]) == ("budget_exhausted", "tenant_quota")
        assert [e["name"] for e in ev.of("tool.call")] == ["add"], "the crossing turn's call still ran"
        last = fake.message_requests[-1]
        assert {t["name"] for t in last.get("tools") or []} <= {"finish_agentic_task"}, "one tool-less answer"
        assert ended["final_text"].startswith("done") and len(ev.of("message")) == 2


def across_routers(system: LoopwireContainer, name: str, **labels: str) -> list[float]:
    return across(system, "router", name, **labels)


@pytest.mark.timeout(180)
async def test_usage_and_metrics_match_the_runs(quota_system: LoopwireContainer, holds: Holds) -> None:
    async with connected(quota_system) as nc:
        ended = []
        warnings = []
        for model in (PRICED, UNPRICED, PRICED):
            session = sid("meter", "m")
            async with SessionEvents(nc, session) as ev:
                await start(ev, "hold k-meter-" + session, model={"primary": model})
                holds.gate("k-meter-" + session).set()
                ended.append(await ev.wait_for("run.ended", timeout=30))
                warnings += [w["code"] for w in ev.of("warning")]
        assert [e["status"] for e in ended] == ["completed"] * 3
        assert warnings.count("tenant_unpriced") == 1, warnings
        tokens = sum(e["usage"]["input_tokens"] + e["usage"]["output_tokens"] for e in ended)
        usd = sum(e["cost_usd"] or 0.0 for e in ended)
        assert ended[1]["cost_usd"] is None and usd > 0

        usage = await usage_of(nc, "meter")
        own = json.loads((await nc.request("loopwire.api.meter.tenant.usage", b"{}", timeout=5)).data)
        assert own == usage
        assert (usage["running"], usage["queued"], usage["tokens_today"]) == (0, 0, tokens)
        assert usage["usd_today"] == pytest.approx(usd, abs=1e-6), "the unpriced run counted tokens only"
        assert usage["limits"] == LIMITS["meter"]
        theirs = json.loads((await nc.request("loopwire.api.meter.tenant.usage", b'{"tenant": "acme"}', timeout=5)).data)
        assert theirs["error"]["code"] == "invalid_tenant"

        # the counters count each token once across the two routers; the gauges are the fleet's
        assert sum(across_routers(quota_system, "loopwire_tenant_tokens_total", tenant="meter")) == tokens
        assert sum(across_routers(quota_system, "loopwire_tenant_cost_usd_total", tenant="meter")) == \
            pytest.approx(usd, abs=1e-6)
        deadline = asyncio.get_running_loop().time() + 10
        while True:  # every router's sweep sets the fleet's gauges
            gauges = [across_routers(quota_system, "loopwire_tenant_usage_today", tenant="meter", allowance="tokens"),
                      across_routers(quota_system, "loopwire_tenant_allowance_per_day", tenant="meter",
                                     allowance="usd"),
                      across_routers(quota_system, "loopwire_tenant_running", tenant="meter")]
            if gauges == [[tokens, tokens], [100.0, 100.0], [0.0, 0.0]]:
                break
            assert asyncio.get_running_loop().time() < deadline, gauges
            await asyncio.sleep(0.3)

        # tenants beyond LOOPWIRE_TENANT_METRICS_LABELS (the six named ones) are `other`
        unnamed = sid("zeta", "z")
        async with SessionEvents(nc, unnamed) as ev:
            await start(ev, "hi from zeta")
            zeta = await ev.wait_for("run.ended")
        zeta_tokens = zeta["usage"]["input_tokens"] + zeta["usage"]["output_tokens"]
        assert sum(across_routers(quota_system, "loopwire_tenant_tokens_total", tenant="other")) >= zeta_tokens
        assert sum(across_routers(quota_system, "loopwire_tenant_tokens_total", tenant="zeta")) == 0
        assert (await usage_of(nc, "zeta"))["tokens_today"] == zeta_tokens


KILLS_AFTER_S = (0.01, 0.02, 0.03, 0.04)
"""When each round's router is killed after the release: the two runs end within about
50 ms of it (their results, the commits of their ends, the slots handed on, the next two
runs started), so the kills land in the middle of that, at different points."""


@pytest.mark.timeout(300)
async def test_kill_9_of_a_router_while_runs_are_queued_running_and_ending_keeps_the_slots_exact(
        quota_system: LoopwireContainer, holds: Holds) -> None:
    """max_running 2, eight runs: two run and six wait. Each round releases the two
    running ones and kills -9 a router (the two in turn) while those end and the next two
    are handed their slots; the last round kills none."""
    routers = quota_system.of_service("router")
    rounds = len(KILLS_AFTER_S) + 1
    async with connected(quota_system) as nc:
        sessions = [sid("crash", f"c{n}") for n in range(2 * rounds)]
        followers = [SessionEvents(nc, s) for s in sessions]
        for ev in followers:
            await ev.__aenter__()
        try:
            for n, ev in enumerate(followers):
                await start(ev, f"hold ck{n}")
            await settles_to(nc, "crash", running=2, queued=len(sessions) - 2)
            for round_ in range(rounds):
                running = await holds.held(2)
                assert len(holds.started) == 2 * (round_ + 1), (running, holds.started)
                for key in running:
                    holds.gate(key).set()
                if round_ < len(KILLS_AFTER_S):
                    await asyncio.sleep(KILLS_AFTER_S[round_])
                    await asyncio.to_thread(routers[round_ % 2].kill)  # the calls answer meanwhile
                    await asyncio.sleep(0.5)
                    await asyncio.to_thread(quota_system.start_loopwire)
            ended = [await ev.wait_for("run.ended", timeout=60) for ev in followers]
        finally:
            for ev in followers:
                await ev.__aexit__(None, None, None)
        assert [e["status"] for e in ended] == ["completed"] * len(sessions)
        assert holds.most_active <= 2, "no slot was given twice"
        assert all(count == 1 for count in holds.started.values()), holds.started
        await settles_to(nc, "crash", running=0, queued=0)
        spans = []
        for session in sessions:
            transcript = (await query(nc, "transcript.get", {"session_id": session}))["events"]
            kinds = [e["kind"] for e in transcript]
            assert kinds.count("run.started") == 1 and kinds.count("run.ended") == 1, (session, kinds)
            assert [e["seq"] for e in transcript] == sorted({e["seq"] for e in transcript})
            spans.append((next(e["ts"] for e in transcript if e["kind"] == "run.started"),
                          next(e["ts"] for e in transcript if e["kind"] == "run.ended")))
        # From the events' own times: never more than two of the tenant's runs at once.
        for begin, _ in spans:
            assert sum(1 for b, e in spans if b <= begin < e) <= 2, spans
