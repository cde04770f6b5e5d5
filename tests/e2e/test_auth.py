"""deploy/nats/users.conf end to end: a real nats-server with loopwire's three users,
`loopwire up` as the services user, a Redis with `requirepass`.

- the whole public contract works as the client user (ingress verbs, events live and
  through an ordered JetStream consumer, every query), with a tool provider connected as
  the provider user;
- the client user can neither publish to nor subscribe on any internal subject: the
  server refuses each with a permissions violation;
- the provider user can only answer discovery and calls on its endpoints;
- the CLI (`loopwire run`, `loopwire transcript`) connects as the client user over
  mutual TLS with a throwaway CA.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats import micro
from nats.aio.client import Client as NatsClient

from loopwire.shared.contract.subjects import Subjects
from loopwire.testing import LoopwireContainer
from tests.fakes.anthropic_server import FakeAnthropic
from tests.tls_certs import make_tls_files

from .conftest import E2E_ENV, wait_for_tools
from .events import SessionEvents, query

pytestmark = pytest.mark.e2e

USERS_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "users.conf"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PASSWORDS = {
    "LOOPWIRE_NATS_SERVICES_PASSWORD": "svc-pw-" + uuid.uuid4().hex[:12],
    "LOOPWIRE_NATS_CLIENT_PASSWORD": "cli-pw-" + uuid.uuid4().hex[:12],
    "LOOPWIRE_NATS_PROVIDER_PASSWORD": "prv-pw-" + uuid.uuid4().hex[:12],
}
REDIS_PASSWORD = "redis-pw-" + uuid.uuid4().hex[:12]
VIOLATION = "permissions violation"


def services_env(fake: FakeAnthropic, **more: str) -> dict[str, str]:
    return {**E2E_ENV, "ANTHROPIC_BASE_URL": fake.url, "LOOPWIRE_NATS_USER": "loopwire-services",
            "LOOPWIRE_NATS_PASSWORD": PASSWORDS["LOOPWIRE_NATS_SERVICES_PASSWORD"],
            "LOOPWIRE_REDIS_PASSWORD": REDIS_PASSWORD, **more}


@pytest.fixture(scope="module", params=["up", "split"])
def secured(request: pytest.FixtureRequest, fake_anthropic: FakeAnthropic) -> Iterator[LoopwireContainer]:
    """`loopwire up`, and the deployed layout (one `loopwire serve` per service, two
    routers), each as the services user against the users of deploy/nats/users.conf."""
    with LoopwireContainer(env=services_env(fake_anthropic), layout=request.param,
                           nats_options={"include": USERS_CONF, "env": PASSWORDS},
                           redis_options={"password": REDIS_PASSWORD}) as lw:
        yield lw


class Connection:
    """A nats-py connection as one of the users, recording the errors the server sends."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc: NatsClient | None = None
        self._changed = asyncio.Condition()

    async def open(self, url: str, user: str, **options: Any) -> NatsClient:
        async def on_error(exc: Exception) -> None:
            async with self._changed:
                self.errors.append(str(exc).lower())
                self._changed.notify_all()

        self.nc = await nats.connect(url, user=f"loopwire-{user}",
                                     password=PASSWORDS[f"LOOPWIRE_NATS_{user.upper()}_PASSWORD"],
                                     error_cb=on_error, **options)
        return self.nc

    async def violation(self, subject: str, timeout: float = 5.0) -> None:
        """Wait for the server's permissions violation naming `subject`."""
        async with asyncio.timeout(timeout), self._changed:
            await self._changed.wait_for(
                lambda: any(VIOLATION in e and f'"{subject.lower()}"' in e for e in self.errors))


@pytest.fixture
async def client(secured: LoopwireContainer) -> AsyncIterator[Connection]:
    conn = Connection()
    await conn.open(secured.get_nats_url(), "client")
    yield conn
    assert conn.nc is not None
    await conn.nc.drain()


async def serve_add(nc: NatsClient, calls: list[dict[str, Any]]) -> Any:
    """The tool `add` on `loopwire.tool.add`, the namespace the provider user may serve."""
    svc = await micro.add_service(nc, name="secured-tools", version="1.0.0")

    async def add(req: micro.Request) -> None:
        body = json.loads(req.data)
        calls.append(body)
        await req.respond(json.dumps({"content": str(body["a"] + body["b"]), "is_error": False}).encode())

    schema = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"]}
    await svc.add_endpoint(name="add", subject="loopwire.tool.add", handler=add, metadata={
        "loopwire.tool": "add", "description": "Add two numbers.", "input_schema": json.dumps(schema)})
    return svc


@pytest.fixture
async def provider(secured: LoopwireContainer) -> AsyncIterator[tuple[Connection, list[dict[str, Any]]]]:
    conn = Connection()
    nc = await conn.open(secured.get_nats_url(), "provider")
    calls: list[dict[str, Any]] = []
    svc = await serve_add(nc, calls)
    yield conn, calls
    await svc.stop()
    await nc.drain()


def stored_events(events: list[dict[str, Any]]) -> list[tuple[int, str]]:
    return [(e["seq"], e["kind"]) for e in events if e["kind"] != "text.delta"]


def until_second_run_end(events: list[tuple[int, str]]) -> list[tuple[int, str]]:
    ends = [i for i, (_, kind) in enumerate(events) if kind == "run.ended"]
    return events[:ends[1] + 1] if len(ends) >= 2 else events


@pytest.mark.timeout(180)
async def test_the_public_contract_works_as_the_client_user(
        client: Connection, provider: tuple[Connection, list[dict[str, Any]]], fake: FakeAnthropic) -> None:
    nc = client.nc
    assert nc is not None
    provider_conn, calls = provider
    # tools.list as the client; discovery reached the provider (generous: a loaded machine)
    await wait_for_tools(nc, {"add"}, timeout=60)

    # start -> a tool call on the provider -> completed; followed live AND through an
    # ordered consumer on LOOPWIRE_EVENTS.
    fake.script("*", [
        {"chunks": ["Adding."], "tool_use": [{"name": "add", "input": {"a": 2, "b": 40}}]},
        {"chunks": ["It is 42."], "stop_reason": "end_turn"},
        {"chunks": ["Again: 42."], "stop_reason": "end_turn"},
    ])
    s = f"auth-{uuid.uuid4().hex[:10]}"
    ordered: list[dict[str, Any]] = []
    ordered_ended = asyncio.Event()

    async def on_ordered(msg: Any) -> None:
        ordered.append(json.loads(msg.data))
        if sum(e["kind"] == "run.ended" for e in ordered) == 2:
            ordered_ended.set()

    js_sub = await nc.jetstream().subscribe(f"loopwire.out.{s}.>", ordered_consumer=True, cb=on_ordered)
    async with SessionEvents(nc, s) as ev:
        ack = await ev.publish("start", {"v": 1, "input": "What is 2 + 40?", "tools": ["add"]})
        assert ack["stream"] == "LOOPWIRE_INGRESS"
        ended = await ev.wait_for("run.ended", timeout=60)
        assert ended["status"] == "completed" and ended["final_text"] == "It is 42."
        assert calls == [{"a": 2, "b": 40}]
        # message: a follow-up on the idle session starts the next run
        await ev.publish("message", {"content": "Once more?"})
        again = await ev.wait_for("run.ended", count=2, timeout=60)
        assert again["final_text"] == "Again: 42."
        # steer, abort and decision are accepted into the ingress stream (their effects
        # are the router's, tested elsewhere); a decision without a checkpoint is answered
        for verb, body in (("steer", {"content": "shorter"}), ("abort", {"reason": "done"}),
                           ("decision", {"checkpoint_id": "none", "decision": "approve"})):
            assert (await ev.publish(verb, body))["stream"] == "LOOPWIRE_INGRESS"
        await ev.wait_for("error", timeout=60, code="unknown_checkpoint")
        await asyncio.wait_for(ordered_ended.wait(), 60)
        # Events of two processes (the llm's `generating` of the aborted run, the router's
        # refusal) can reach the live subscription in either order: it stays open until it
        # has seen what the stream gave, or 10 s (the assertions below then say what is missing).
        for _ in range(100):
            if set(stored_events(ordered)) <= set(stored_events(ev.events)):
                break
            await asyncio.sleep(0.1)
    await js_sub.unsubscribe()
    # The stream gave the same events as the live subscription (text.delta may be ephemeral).
    # Up to the second run.ended each event follows from the one before it: the same order
    # both ways. The refusals of the three inputs published back to back after it may be
    # applied by the two router replicas one after the other and published by each on its
    # own connection, so their publishes can cross (docs/deployment.md): each once, in any order.
    through_stream, live = stored_events(ordered), stored_events(ev.events)
    runs = until_second_run_end(live)
    assert len(runs) >= 10 and through_stream[:len(runs)] == runs, (through_stream, live)
    rest = through_stream[len(runs):]
    assert len(set(rest)) == len(rest) and set(rest) <= set(live[len(runs):]), (through_stream, live)

    session = await query(nc, "session.get", {"session_id": s})
    assert session["status"] == "idle" and session["turns"] >= 3
    transcript = await query(nc, "transcript.get", {"session_id": s})
    assert [e["kind"] for e in transcript["events"]][0] == "run.started"
    listed = await query(nc, "sessions.list", {"limit": 5})
    assert listed["sessions"][0]["session_id"] == s
    assert client.errors == [] and provider_conn.errors == []


INTERNAL_PUBLISH = [
    "loopwire.work.router.result", "loopwire.work.llm.generate", "loopwire.work.memory.assemble",
    "loopwire.work.tools.execute", "loopwire.rpc.llm.summarize", "loopwire.ctl.s1.cancel", "loopwire.ctl.chains",
    "loopwire.out.s1.run.ended",  # forging events
    "loopwire.tool.add",  # calling a provider directly, around the tool policy
    "$SRV.INFO", "$JS.API.STREAM.DELETE.LOOPWIRE_WORK", "$JS.API.STREAM.PURGE.LOOPWIRE_EVENTS",
    "$JS.API.STREAM.MSG.GET.LOOPWIRE_INGRESS", "$JS.API.CONSUMER.CREATE.LOOPWIRE_WORK",
    "$JS.API.STREAM.CREATE.EVIL", "$JS.API.CONSUMER.DELETE.LOOPWIRE_EVENTS_x.router",
]
INTERNAL_SUBSCRIBE = ["loopwire.work.>", "loopwire.rpc.>", "loopwire.ctl.>", "loopwire.in.>", "loopwire.tool.>",
                      "$SRV.>", "$JS.API.>", ">"]


def test_the_lists_cover_every_internal_subject() -> None:
    """Every subject loopwire uses internally (shared/contract/subjects.py) is in the lists above."""
    subjects = Subjects("loopwire")
    internal = {subjects.router_result, subjects.llm_generate, subjects.memory_assemble, subjects.tools_execute,
                subjects.llm_summarize, subjects.cancel("s1"), subjects.chains}
    assert internal <= set(INTERNAL_PUBLISH)
    for wildcard in (subjects.work_all, "loopwire.ctl.>", "loopwire.rpc.>"):
        assert wildcard in INTERNAL_SUBSCRIBE


async def test_the_client_user_is_refused_every_internal_subject(client: Connection) -> None:
    nc = client.nc
    assert nc is not None
    for subject in INTERNAL_PUBLISH:
        await nc.publish(subject, b"{}")
        await client.violation(subject)
    for subject in INTERNAL_SUBSCRIBE:
        await nc.subscribe(subject)
        await client.violation(subject)
    # A request to the llm's internal RPC is never answered: it never reached the service.
    with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
        await nc.request("loopwire.rpc.llm.summarize", b"{}", timeout=1)
    assert nc.is_connected


async def test_the_provider_user_only_answers(secured: LoopwireContainer,
                                              provider: tuple[Connection, list[dict[str, Any]]]) -> None:
    conn, _ = provider
    nc = conn.nc
    assert nc is not None
    for subject in ("loopwire.in.s1.start", "loopwire.api.session.get", "loopwire.work.router.result",
                    "loopwire.out.s1.run.ended", "_INBOX.forged"):
        await nc.publish(subject, b"{}")
        await conn.violation(subject)
    for subject in ("loopwire.out.>", "loopwire.in.>", "_INBOX.>", "loopwire.work.>"):
        await nc.subscribe(subject)
        await conn.violation(subject)


@pytest.mark.timeout(120)
def test_the_cli_runs_as_the_client_user_over_mutual_tls(fake_anthropic: FakeAnthropic, tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path)
    tls_env = {"LOOPWIRE_NATS_TLS_CA": str(tls.ca), "LOOPWIRE_NATS_TLS_CERT": str(tls.client_cert),
               "LOOPWIRE_NATS_TLS_KEY": str(tls.client_key)}
    server_tls = {"cert_file": str(tls.server_cert), "key_file": str(tls.server_key), "ca_file": str(tls.ca),
                  "verify": True}
    fake_anthropic.reset()
    fake_anthropic.script("*", [{"chunks": ["Hello over TLS."], "stop_reason": "end_turn"}])
    with LoopwireContainer(env=services_env(fake_anthropic, **tls_env),
                           nats_options={"include": USERS_CONF, "env": PASSWORDS, "tls": server_tls},
                           redis_options={"password": REDIS_PASSWORD}) as lw:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWIRE_")}
        env.update({"LOOPWIRE_NATS_URL": lw.get_nats_url(), "LOOPWIRE_NATS_USER": "loopwire-client",
                    "LOOPWIRE_NATS_PASSWORD": PASSWORDS["LOOPWIRE_NATS_CLIENT_PASSWORD"], **tls_env})
        cli = [sys.executable, "-m", "loopwire.cli"]
        run = subprocess.run([*cli, "run", "Say hello", "--session", "cli-tls-1", "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "Hello over TLS." in run.stdout
        shown = subprocess.run([*cli, "transcript", "cli-tls-1", "--json"], env=env, capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0, shown.stderr
        kinds = [json.loads(line)["kind"] for line in shown.stdout.splitlines() if line.startswith("{")]
        assert kinds[0] == "run.started" and kinds[-1] == "run.ended"
        # without the client certificate the server refuses the CLI
        bare = {k: v for k, v in env.items() if k not in ("LOOPWIRE_NATS_TLS_CERT", "LOOPWIRE_NATS_TLS_KEY")}
        refused = subprocess.run([*cli, "transcript", "cli-tls-1"], env=bare, capture_output=True, text=True,
                                 timeout=60)
        assert refused.returncode != 0
        # and no password of any user appears in what the CLI or the services printed
        for secret in [*PASSWORDS.values(), REDIS_PASSWORD]:
            assert secret not in run.stdout + run.stderr + shown.stdout + shown.stderr + lw.logs()


@pytest.mark.timeout(180)
async def test_the_example_tool_provider_serves_runs_on_the_secured_nats(
        secured: LoopwireContainer, client: Connection, fake: FakeAnthropic) -> None:
    """examples/tool_provider.py as written, connected as the provider user of
    deploy/nats/users.conf, serves a run that a client user started."""
    env = {**os.environ, "LOOPWIRE_NATS_USER": "loopwire-provider",
           "LOOPWIRE_NATS_PASSWORD": PASSWORDS["LOOPWIRE_NATS_PROVIDER_PASSWORD"]}
    provider = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLES / "tool_provider.py"), "--nats-url", secured.get_nats_url(),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    nc = client.nc
    assert nc is not None
    try:
        await wait_for_tools(nc, {"weather"}, timeout=60)
        fake.script("*", [{"chunks": ["Checking."], "tool_use": [{"name": "weather", "input": {"city": "Paris"}}]},
                          {"chunks": ["Sunny."], "stop_reason": "end_turn"}])
        s = f"auth-example-{uuid.uuid4().hex[:8]}"
        async with SessionEvents(nc, s) as ev:
            await ev.publish("start", {"v": 1, "input": "Weather in Paris?", "tools": ["weather"]})
            result = await ev.wait_for("tool.result", timeout=60)
            ended = await ev.wait_for("run.ended", timeout=60)
    finally:
        provider.terminate()
        out, _ = await asyncio.wait_for(provider.communicate(), 20)
    assert "Sunny, 21 °C in Paris" in json.dumps(result, ensure_ascii=False), result
    assert ended["status"] == "completed" and ended["final_text"] == "Sunny."
    assert "weather('Paris') for call toolu_" in out.decode(), out.decode()
    assert provider.returncode == 0
    assert client.errors == []
