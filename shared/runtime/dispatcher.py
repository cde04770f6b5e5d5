"""How an envelope reaches the service that takes it: one table of routes, one way through it.

Every envelope one service sends another has one route (`work_routes`), keyed by its type:
the service that takes it, its subject, and how that service may take it in this process.
`Dispatcher.send` goes through the doors in their order:

1. *In this process* (only where in-process hand-overs are on, `loopwire up`, and not
   during a graceful stop), when the taking service registered its handler here:
   - `call`: the handler is awaited in the sender's stack (a step result to the router, a
     generation to the llm). The sender's own work message stays unsettled meanwhile, so
     a crash redelivers it and the work is answered from its record.
   - `chain`: the work handler runs as a task of the current chain (the router's work to
     memory and tools: the router must not run it while it holds a session's lock;
     shared/runtime/chain.py).
2. *Direct*: a request to the router replica that sent the step's work and named itself in
   it (`result_to`, shared/runtime/direct_results.py), with LOOPWIRE_DIRECT_RESULTS on.
3. *JetStream*: a work message on the route's subject with its Nats-Msg-Id. Work the router
   sends this way names the replica its result should come back to.

One policy for a door that fails (`hand_over`): a call or request that raises goes on as
its own work message after the pause its second delivery would have had, its attempt
counted (bus.ATTEMPTS_HEADER), so from there it is redelivered and given up exactly as
between separate processes; work whose service is not here is published at once, no
attempt counted. A result produced under a redelivered chain root is marked *recover*
(chain.py) on every door.

The requests one service asks another and waits for the answer of (an exact token count, a
summary) have their table too (`ask_routes`): a call when the answering service runs here,
else a core NATS request, each within its route's timeout.

Every door is counted in one place, `HOOKS.dispatched` (the observability layer fills it in).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from pydantic import BaseModel

from loopwire.shared.contract import codec
from loopwire.shared.contract.envelopes import (
    AssembleContext,
    ExecuteTools,
    ExecutorPermission,
    Generate,
    GenerationResult,
    TenantAdmission,
    TokenCount,
    ToolCallFinished,
    ToolsResult,
)
from loopwire.shared.contract.subjects import Subjects
from loopwire.shared.runtime.bus import Bus
from loopwire.shared.runtime.chain import CURRENT_DELIVERY, WorkHandler, hand_off
from loopwire.shared.runtime.chain_balance import ChainBalance
from loopwire.shared.runtime.direct_results import DirectRequests, result_applied
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.runtime.redelivery import RedeliveryPolicy, is_outage, to_jetstream

__all__ = ["Ask", "Dispatcher", "Route", "ask_routes", "hand_over", "work_routes"]

log = logging.getLogger("loopwire.dispatch")

Local = Literal["call", "chain"]
Call = Callable[[Any, bool], Awaitable[Any]]
"""An in-process handler of a `call` route: (envelope, recover)."""
Publish = Callable[[int], Awaitable[None]]
"""Publishes the work as a JetStream message, counting that many attempts made in process."""


@dataclass(frozen=True)
class Route:
    """How the envelopes of `types` reach the service that takes them."""

    types: tuple[type[BaseModel], ...]
    service: str
    subject: str
    label: str
    """The work's name in metrics and logs (`memory.assemble`, `router.result`...)."""
    local: Local | None
    """How the service takes it in this process; None: always a message (a tenant's answer
    goes to whichever router replica takes it)."""
    direct: bool = False
    """It may go to the replica the envelope names (step results to their router)."""
    names_replica: bool = False
    """Published, it names this replica as the one its result comes back to (`result_to`)."""
    recovers: bool = False
    """Sent under a redelivered chain root, it is marked recover (step results)."""
    timeout_s: float | None = None
    """The direct door's wait for the replica's answer."""
    direct_prefix: str = ""
    """The replicas' direct subjects, `<prefix>.direct.<service>.` (Subjects.direct)."""


@dataclass(frozen=True)
class Ask:
    """A request one service asks another and awaits the answer of."""

    service: str
    subject: str
    answer: type[BaseModel]
    timeout_s: float


RESULTS: tuple[type[BaseModel], ...] = (GenerationResult, ToolsResult, ToolCallFinished, ExecutorPermission)
"""What a service hands to the router."""


def work_routes(subjects: Subjects, *, direct_timeout_s: float) -> tuple[Route, ...]:
    """The table: every envelope type sent on a work subject, once."""
    return (
        Route((AssembleContext,), "memory", subjects.memory_assemble, "memory.assemble", "chain",
              names_replica=True),
        Route((ExecuteTools,), "tools", subjects.tools_execute, "tools.execute", "chain", names_replica=True),
        Route((Generate,), "llm", subjects.llm_generate, "llm.generate", "call"),
        Route(RESULTS, "router", subjects.router_result, "router.result", "call", direct=True, recovers=True,
              timeout_s=direct_timeout_s, direct_prefix=subjects.direct("router", "")),
        Route((TenantAdmission,), "router", subjects.router_result, "router.admission", None),
    )


def ask_routes(subjects: Subjects, *, summary_timeout_s: float) -> dict[str, Ask]:
    return {
        # The llm service gives the count_tokens endpoint 10 s (services/llm/token_count.py).
        "count_tokens": Ask("llm", subjects.llm_count_tokens, TokenCount, 12.0),
        "summarize": Ask("llm", subjects.llm_summarize, GenerationResult, summary_timeout_s),
    }


def index(routes: Iterable[Route]) -> dict[type[BaseModel], Route]:
    """Each envelope type to its route; a type with two is a wiring error."""
    by_type: dict[type[BaseModel], Route] = {}
    for route in routes:
        for kind in route.types:
            if kind in by_type:
                raise ValueError(f"{kind.__name__} has two routes: {by_type[kind].label} and {route.label}")
            by_type[kind] = route
    return by_type


class Dispatcher:
    """The routes of this process, the handlers its services registered at launch, and the
    doors (`send`, `ask`)."""

    def __init__(self, subjects: Subjects, *, policy: RedeliveryPolicy, replica_id: str, direct_results: bool,
                 chain_max_hops: int, direct_timeout_s: float, summary_timeout_s: float) -> None:
        self.routes = index(work_routes(subjects, direct_timeout_s=direct_timeout_s))
        self.asks = ask_routes(subjects, summary_timeout_s=summary_timeout_s)
        self.policy = policy
        self.replica_id = replica_id
        self.direct_results = direct_results
        self.chain_max_hops = chain_max_hops
        self.in_process = False
        """Set at launch where in-process hand-overs are on (several services in one process)."""
        self.stopping = False
        """Set when a graceful stop begins: work goes to JetStream, where it waits for the
        next process while the consumers drain."""
        self.balance: ChainBalance | None = None
        """Spreads chains over the replicas (chain_balance.py), where hand-offs are on."""
        self.hop_tasks: set[asyncio.Task[None]] = set()
        """Handed-off hops running now (a graceful stop waits for them)."""
        self._calls: dict[type[BaseModel], Call] = {}
        self._chain: dict[str, WorkHandler] = {}
        self._answers: dict[str, Callable[[Any], Awaitable[Any]]] = {}
        self._bus: Bus | None = None
        self._direct: DirectRequests | None = None

    # -- filled at launch ----------------------------------------------------------------
    def serve(self, types: Iterable[type[BaseModel]], handler: Call) -> None:
        """`handler(envelope, recover)` takes the envelopes of `types` in this process (a
        `call` route)."""
        for kind in types:
            if self.routes[kind].local != "call":
                raise ValueError(f"{kind.__name__} is not taken by a call")
            self._calls[kind] = handler

    def take(self, subject: str, handler: WorkHandler) -> None:
        """`handler` is this process's work handler of `subject`, for a `chain` route."""
        self._chain[subject] = handler

    def answer(self, name: str, handler: Callable[[Any], Awaitable[Any]]) -> None:
        """`handler(request)` answers the ask `name` in this process."""
        if name not in self.asks:
            raise ValueError(f"no ask named {name}")
        self._answers[name] = handler

    def attach(self, bus: Bus) -> None:
        """The connection is up: the bus, and the direct requests' inbox."""
        self._bus = bus
        timeout_s = max((r.timeout_s or 0.0 for r in self.routes.values() if r.direct), default=0.0)
        self._direct = DirectRequests(bus.nc, timeout_s=timeout_s)

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("the bus exists once the broker is connected")
        return self._bus

    # -- the doors -----------------------------------------------------------------------
    async def send(self, envelope: BaseModel, *, msg_id: str, replica: str | None = None,
                   stored: dict[str, Any] | None = None) -> None:
        """`envelope` to the service its route names, through the first door open to it.
        `replica`: the router replica that sent the step's work (a result's direct door);
        `stored`: the envelope's JSON as the sender keeps it already (published as it is)."""
        route = self.routes[type(envelope)]
        here = self.in_process and not self.stopping
        if route.local == "chain":
            handler = self._chain.get(route.subject) if here else None
            if handler is not None and self._hand_off(route, handler, envelope, msg_id=msg_id):
                HOOKS.dispatched(route.label, route.service, "chain")
                return
            body: BaseModel | dict[str, Any] = envelope if stored is None else stored
            if route.names_replica and self.direct_results:
                body = {**(stored if stored is not None else envelope.model_dump(mode="json")),
                        "result_to": self.replica_id}
            await self.bus.publish_work(route.subject, body, msg_id=msg_id)
            HOOKS.dispatched(route.label, route.service, "jetstream")
            return
        delivery = CURRENT_DELIVERY.get() if route.recovers else None
        recover = delivery is not None and delivery.redelivered

        async def publish(attempts: int) -> None:
            await self.bus.publish_work(route.subject, envelope, msg_id=msg_id, recover=recover, attempts=attempts)
            HOOKS.dispatched(route.label, route.service, "jetstream")

        door: Callable[[], Awaitable[None]] | None = None
        call = self._calls.get(type(envelope)) if here and route.local == "call" else None
        if call is not None:
            door = partial(self._call, route, call, envelope, recover=recover)
        elif route.direct and replica and self.direct_results and not self.stopping:
            door = partial(self._request, route, envelope, msg_id, recover=recover, replica=replica,
                           publish=publish)
        await hand_over(door, publish, policy=self.policy, what=f"{route.subject} {msg_id}")

    async def _call(self, route: Route, call: Call, envelope: BaseModel, *, recover: bool) -> None:
        await call(envelope, recover)
        HOOKS.dispatched(route.label, route.service, "process")

    async def _request(self, route: Route, envelope: BaseModel, msg_id: str, *, recover: bool, replica: str,
                       publish: Publish) -> None:
        assert self._direct is not None, "attach first"
        if await result_applied(self._direct, route.direct_prefix + replica, envelope, msg_id=msg_id,
                                recover=recover):
            HOOKS.dispatched(route.label, route.service, "direct")
        else:  # that replica is gone or stopping
            await publish(0)

    def _hand_off(self, route: Route, handler: WorkHandler, envelope: BaseModel, *, msg_id: str) -> bool:
        """A task of the current chain (chain.py); False when it must be published instead.
        A hop that fails there is published with `msg_id`, as it would have been."""
        async def publish() -> None:
            await self.bus.publish_work(route.subject, envelope, msg_id=msg_id, attempts=1)

        return hand_off(handler, envelope, self.hop_tasks, max_hops=self.chain_max_hops, balance=self.balance,
                        subject=route.subject, fallback=publish)

    async def ask(self, name: str, request: BaseModel) -> Any:
        """The answer to `request` from the service the ask `name` goes to: a call when it runs
        here, else a core request; nats-py's errors (no responders, timeout), TimeoutError or
        the answer's ValidationError raised as they come."""
        route = self.asks[name]
        handler = self._answers.get(name) if self.in_process and not self.stopping else None
        if handler is not None:
            async with asyncio.timeout(route.timeout_s):
                return await handler(request)
        reply = await self.bus.nc.request(route.subject, codec.dumps(request), timeout=route.timeout_s)
        return route.answer.model_validate_json(reply.data)

    async def wait_for_hops(self, timeout: float) -> None:
        """Until the handed-off hops in flight have ended (a graceful stop): each hands its
        next hop to JetStream, since `stopping` is set, and its chain settles its root."""
        if self.hop_tasks:
            await asyncio.wait(set(self.hop_tasks), timeout=timeout)


async def hand_over(door: Callable[[], Awaitable[None]] | None, publish: Publish, *, policy: RedeliveryPolicy,
                    what: str) -> None:
    """`door()` when the work may go through one before JetStream, else `publish(0)`. A door
    that raises is published after its pause, its attempt counted (`publish(1)`)."""
    if door is None:
        await publish(0)
        return
    try:
        await door()
    except Exception as exc:
        log.warning("%s failed in process (%s: %s); publishing it as its own work message", what,
                    type(exc).__name__, exc)
        await to_jetstream(lambda: publish(1), outage=is_outage(exc), policy=policy)
