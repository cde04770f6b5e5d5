"""Tenants (LOOPWIRE_TENANTS, deploy/nats/tenants.conf) end to end: a real nats-server with
two tenants' users, `loopwire up` as the services user. Each tenant runs its own
sessions through the contract; neither can start, read, follow, steer or abort the
other's (the server refuses the subjects, the query service refuses another tenant's
session id on a tenant's own subject), and the sessions list shows each only its own."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NatsClient

from loopwire.client import LoopwireClient
from loopwire.settings import Settings
from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic

from .conftest import E2E_ENV
from .events import SessionEvents

pytestmark = pytest.mark.e2e

TENANTS_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "tenants.conf"
PASSWORDS = {name: f"{name.lower()}-{uuid.uuid4().hex[:10]}" for name in (
    "LOOPWIRE_NATS_SERVICES_PASSWORD", "LOOPWIRE_NATS_PROVIDER_PASSWORD",
    "LOOPWIRE_NATS_TENANT_ACME_PASSWORD", "LOOPWIRE_NATS_TENANT_GLOBEX_PASSWORD")}


@pytest.fixture(scope="module")
def tenanted(fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    env = {**E2E_ENV, "ANTHROPIC_BASE_URL": fake_anthropic.url, "LOOPWIRE_TENANTS": "true",
           "LOOPWIRE_NATS_USER": "loopwire-services",
           "LOOPWIRE_NATS_PASSWORD": PASSWORDS["LOOPWIRE_NATS_SERVICES_PASSWORD"]}
    with LoopwireContainer(env=env, nats_options={"include": TENANTS_CONF, "env": PASSWORDS}) as lw:
        yield lw


class Tenant:
    """A client of one tenant, with the errors the server sends it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.errors: list[str] = []
        self.changed = asyncio.Condition()
        self.lw: LoopwireClient | None = None

    @property
    def nc(self) -> NatsClient:
        assert self.lw is not None
        return self.lw.nc

    async def connect(self, url: str) -> Tenant:
        async def on_error(exc: Exception) -> None:
            async with self.changed:
                self.errors.append(str(exc).lower())
                self.changed.notify_all()

        settings = Settings(nats_url=url, nats_user=self.name, tenant=self.name,
                            nats_password=PASSWORDS[f"LOOPWIRE_NATS_TENANT_{self.name.upper()}_PASSWORD"])
        self.lw = await LoopwireClient.from_settings(settings, error_cb=on_error)
        return self

    async def refused(self, subject: str) -> None:
        async with asyncio.timeout(5), self.changed:
            await self.changed.wait_for(
                lambda: any("permissions violation" in e and f'"{subject.lower()}"' in e for e in self.errors))

    async def query(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = await self.nc.request(subject, json.dumps(body).encode(), timeout=5)
        return json.loads(reply.data)


@pytest.fixture
async def tenants(tenanted: LoopwireContainer) -> AsyncIterator[tuple[Tenant, Tenant]]:
    acme = await Tenant("acme").connect(tenanted.get_nats_url())
    globex = await Tenant("globex").connect(tenanted.get_nats_url())
    yield acme, globex
    for tenant in (acme, globex):
        assert tenant.lw is not None
        await tenant.lw.close()


@pytest.mark.timeout(240)
async def test_two_tenants_cannot_reach_each_others_sessions(tenants: tuple[Tenant, Tenant],
                                                            fake: FakeAnthropic) -> None:
    acme, globex = tenants
    assert acme.lw is not None and globex.lw is not None
    fake.script("*", [{"chunks": [f"answer {n}"], "stop_reason": "end_turn"} for n in range(3)])
    own = f"t-{uuid.uuid4().hex[:8]}"
    ended = {t.name: await t.lw.run(own, {"input": "hi", "tools": []}, timeout=90)  # type: ignore[union-attr]
             for t in (acme, globex)}
    assert ended["acme"]["status"] == ended["globex"]["status"] == "completed"
    assert ended["acme"]["session_id"] == f"acme.{own}" and ended["globex"]["session_id"] == f"globex.{own}"
    theirs = f"globex.{own}"

    # start, steer, abort on the other's session: refused by the server
    for verb in ("start", "steer", "abort", "message", "decision"):
        await acme.nc.publish(f"loopwire.in.{theirs}.{verb}", b"{}")
        await acme.refused(f"loopwire.in.{theirs}.{verb}")
    # follow: neither its events nor its replies
    for subject in (f"loopwire.out.{theirs}.>", "loopwire.out.>", "_INBOX_globex.>", "_INBOX.>"):
        await acme.nc.subscribe(subject)
        await acme.refused(subject)
    # read: not on the other's subjects, and not by naming it on one's own
    await acme.nc.publish("loopwire.api.globex.session.get", b"{}")
    await acme.refused("loopwire.api.globex.session.get")
    await acme.nc.publish("loopwire.api.session.get", b"{}")  # the operator's, tenant-less
    await acme.refused("loopwire.api.session.get")
    for query in ("session.get", "transcript.get"):
        reply = await acme.query(f"loopwire.api.acme.{query}", {"session_id": theirs})
        assert reply["error"]["code"] == "invalid_session_id", reply
    # one's own, by its short or full id
    mine = await acme.lw.session_get(own)
    assert mine["session_id"] == f"acme.{own}" and mine["status"] == "idle" and mine["turns"] == 1
    assert (await acme.lw.transcript_get(f"acme.{own}"))["events"][0]["kind"] == "run.started"

    # the sessions list shows each only its own
    for tenant in (acme, globex):
        listed = [s["session_id"] for s in (await tenant.lw.sessions_list(limit=1000))["sessions"]]  # type: ignore[union-attr]
        assert f"{tenant.name}.{own}" in listed
        assert all(sid.startswith(f"{tenant.name}.") for sid in listed), listed

    # and the other's session is untouched by all of the above
    theirs_now = await globex.lw.session_get(own)
    assert theirs_now["status"] == "idle" and theirs_now["turns"] == 1 and theirs_now["runs"] == 1


@pytest.mark.timeout(120)
async def test_a_tenant_forks_its_own_sessions_into_its_own_namespace(tenants: tuple[Tenant, Tenant],
                                                                       fake: FakeAnthropic) -> None:
    acme, globex = tenants
    assert acme.lw is not None and globex.lw is not None
    fake.script("*", [{"chunks": ["mine"], "stop_reason": "end_turn"}, {"chunks": ["theirs"], "stop_reason": "end_turn"}])
    own = f"t-{uuid.uuid4().hex[:8]}"
    for tenant in (acme, globex):
        assert (await tenant.lw.run(own, {"input": "hi", "tools": []}, timeout=90))["status"] == "completed"  # type: ignore[union-attr]
    fork = f"f-{uuid.uuid4().hex[:8]}"
    made = await acme.lw.fork(own, fork)  # short ids: the tenant's own
    assert made["session_id"] == f"acme.{fork}" and made["forked_from"]["session_id"] == f"acme.{own}"
    state = await acme.lw.session_get(fork)
    assert [m["content"][0]["text"] for m in state["messages"]] == ["hi", "mine"]
    for body in ({"session_id": f"globex.{own}", "new_session_id": f"x-{fork}"},    # the other's session
                 {"session_id": own, "new_session_id": f"globex.{fork}"}):          # into the other's namespace
        assert (await acme.query("loopwire.api.acme.session.fork", body))["error"]["code"] == "invalid_session_id"
    await acme.nc.publish("loopwire.api.globex.session.fork", b"{}")
    await acme.refused("loopwire.api.globex.session.fork")
    assert (await globex.lw.session_get(fork))["status"] == "unknown", "nothing was made in globex"
    assert (await globex.lw.session_get(own))["forks"] == [], "the other's session is untouched"


async def test_a_session_id_without_a_tenant_starts_nothing(tenanted: LoopwireContainer) -> None:
    """With tenants on, a one-token session id is dropped by the router, even from a user
    allowed to publish it (the operator's): no event, no session."""
    user, password = "loopwire-services", PASSWORDS["LOOPWIRE_NATS_SERVICES_PASSWORD"]
    nc = await nats.connect(tenanted.get_nats_url(), user=user, password=password)
    try:
        sid = f"plain-{uuid.uuid4().hex[:8]}"
        async with SessionEvents(nc, sid) as ev:
            await ev.publish("start", {"v": 1, "input": "hi"})
            await asyncio.sleep(1.5)
            assert ev.events == []
        reply = json.loads((await nc.request("loopwire.api.session.get",
                                             json.dumps({"session_id": sid}).encode(), timeout=5)).data)
        assert reply["error"]["code"] == "invalid_session_id"
    finally:
        await nc.drain()


@pytest.mark.timeout(120)
async def test_a_tenant_deletes_erases_and_exports_only_its_own(tenants: tuple[Tenant, Tenant],
                                                                fake: FakeAnthropic) -> None:
    acme, globex = tenants
    assert acme.lw is not None and globex.lw is not None
    fake.script("*", [{"chunks": [f"answer {n}"], "stop_reason": "end_turn"} for n in range(3)])
    own, user = f"d-{uuid.uuid4().hex[:8]}", f"person-{uuid.uuid4().hex[:6]}"
    for tenant in (acme, globex):  # the same session id and user id in both
        started = {"input": "hi", "tools": [], "user_id": user}
        assert (await tenant.lw.run(own, started, timeout=90))["status"] == "completed"  # type: ignore[union-attr]
    theirs = f"globex.{own}"
    for query in ("session.delete", "session.export"):
        reply = await acme.query(f"loopwire.api.acme.{query}", {"session_id": theirs})
        assert reply["error"]["code"] == "forbidden", reply
    reply = await acme.query("loopwire.api.acme.user.erase", {"user_id": user, "tenant": "globex"})
    assert reply["error"]["code"] == "forbidden", reply
    for subject in ("loopwire.api.globex.session.delete", "loopwire.api.session.delete"):
        await acme.nc.publish(subject, b"{}")
        await acme.refused(subject)

    exported = await acme.lw.session_export(own)
    assert exported["session_id"] == f"acme.{own}" and exported["state"]["turns"] == 1
    erased = await acme.lw.user_erase(user)
    assert [r["session_id"] for r in erased["sessions"]] == [f"acme.{own}"]
    assert erased["sessions"][0]["deleted"] is True
    assert (await acme.lw.session_get(own))["status"] == "unknown"
    assert (await globex.lw.session_get(own))["status"] == "idle", "the other tenant's is untouched"
    assert (await acme.lw.session_delete(own))["deleted"] is False
    deleted = await globex.lw.session_delete(own)
    assert deleted["session_id"] == theirs and deleted["deleted"] is True
