"""What every service is given: settings, stores, the broker and the publishing bus.

A service is a class with `register(broker)` (its work handlers, through `work_subscriber`,
and its FastStream handlers of queries and RPC), `start()` (after the connection is up:
background tasks) and `stop()`. `loopwire up` runs all five on one
broker connection; `loopwire serve NAME` runs one. See loopwire/launcher.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

import redis.asyncio as aioredis
from faststream.nats import NatsBroker
from nats.js.api import ConsumerConfig
from pydantic import BaseModel

from loopwire.shared.contract import keys
from loopwire.shared.contract.codec import dumps
from loopwire.shared.contract.envelopes import HandedResult
from loopwire.shared.contract.subjects import INGRESS_STREAM, WORK_STREAM, Subjects, stream_name
from loopwire.shared.runtime.bus import Bus, work_headers
from loopwire.shared.runtime.chain import WorkHandler, current_delivery, hand_off, run_handler
from loopwire.shared.runtime.chain_balance import ChainBalance
from loopwire.shared.runtime.credentials import connect_configured_redis, wait_replicas
from loopwire.shared.runtime.direct_results import Apply, DirectReceiver, DirectRequests, request_applied
from loopwire.shared.runtime.handover import ResultReceiver, hand_over
from loopwire.shared.runtime.hooks import HOOKS
from loopwire.shared.runtime.redelivery import DeadLetter, RedeliveryPolicy
from loopwire.shared.runtime.settings import Settings
from loopwire.shared.runtime.streams import until_jetstream_answers
from loopwire.shared.runtime.work_consumer import JetStreamRoot, WorkConsumer, root_delivery
from loopwire.shared.stores.blobs import BlobStore
from loopwire.shared.stores.event_log import EventLogStore, RedisEventLog
from loopwire.shared.stores.replication import Replication
from loopwire.shared.stores.session_store import RedisSessionStore, SessionStore
from loopwire.shared.stores.step_store import RedisStepStore, StepStore

log = logging.getLogger("loopwire.runtime")

P = TypeVar("P")
T = TypeVar("T")


@dataclass
class ServiceContext:
    settings: Settings
    subjects: Subjects
    redis: aioredis.Redis
    sessions: SessionStore
    steps: StepStore
    events: EventLogStore
    broker: NatsBroker
    blobs: BlobStore
    replication: Replication | None = None
    """The scripts' path to Redis (shared/stores/replication.py), whose script channel the
    stores of every service in this process share; None where a test builds the stores."""
    _bus: Bus | None = field(default=None, repr=False)
    _direct_requests: DirectRequests | None = field(default=None, repr=False)
    """The step results this process sends to a router replica (direct_results.py)."""
    consumers: dict[str, tuple[str, str]] = field(default_factory=dict)
    """label -> (stream, durable) of every work consumer registered in this process."""
    work_consumers: list[WorkConsumer] = field(default_factory=list)
    """Those consumers, started by `consume()` (shared/runtime/work_consumer.py)."""
    local: dict[str, object] = field(default_factory=dict)
    """name -> service running in this process, for in-process hand-overs (empty when
    LOOPWIRE_LOCAL_HANDOVER is off or the process runs one service); read through `here`."""
    handlers: dict[str, WorkHandler] = field(default_factory=dict)
    """work subject -> its handler in this process, for hand-offs (shared/runtime/chain.py); filled
    only where in-process hand-overs are on."""
    hop_tasks: set[asyncio.Task[None]] = field(default_factory=set)
    """Handed-off hops running now (a graceful stop waits for them)."""
    balance: ChainBalance | None = None
    """Spreads chains over the replicas (shared/runtime/chain_balance.py), where hand-offs are on."""
    stopping: bool = False
    """Set when a graceful stop begins: hand-overs go back to JetStream, so work that
    arrives while the consumers drain waits in the stream for the next process."""
    policy: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)
    """The one redelivery policy of every work handler (shared/runtime/redelivery.py)."""
    replica_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    """This process's name among the replicas: where the step results of the work its
    router sends come back to (shared/runtime/direct_results.py)."""
    direct_receivers: list[DirectReceiver] = field(default_factory=list)
    """This process's direct subjects, started by `consume()`, stopped first by `stop_consuming()`."""
    _offering: set[tuple[type, type]] = field(default_factory=set, repr=False)
    """(service class, protocol) pairs `here` found to match: an isinstance against a
    runtime protocol looks its members up each time, several times a hop otherwise."""

    def __post_init__(self) -> None:
        s = self.settings
        self.policy = RedeliveryPolicy(tolerance_s=s.outage_tolerance_s, max_deliver=s.max_deliver,
                                       fault_max_deliver=s.fault_max_deliver)

    async def report_dead_letter(self, letter: DeadLetter) -> None:
        """Work given up by a handler, to the router's dead-letter consumer (JetStream,
        LOOPWIRE_DEADLETTERS): its run ends `failed` with an `error` `undeliverable`."""
        msg_id = keys.dead_letter_msg_id(stream=letter.stream, stream_seq=letter.stream_seq, subject=letter.subject,
                                         step_id=letter.step_id, deliveries=letter.deliveries)
        await self.bus.js.publish(self.subjects.dead_letter, letter.model_dump_json().encode(),
                                  headers={"Nats-Msg-Id": msg_id})

    def durable_name(self, label: str) -> str:
        return f"{self.settings.subject_prefix.replace('.', '_')}_{label}"

    @property
    def bus(self) -> Bus:
        if self._bus is None:
            raise RuntimeError("the bus exists once the broker is connected")
        return self._bus

    def attach_bus(self) -> Bus:
        nc = self.broker._connection  # the nats-py client FastStream opened
        if nc is None:
            raise RuntimeError("broker is not connected")
        self._bus = Bus(nc, self.subjects, self.events, jetstream_timeout_s=self.settings.jetstream_timeout_s)
        self._direct_requests = DirectRequests(nc, timeout_s=self.settings.direct_result_timeout_s)
        return self._bus

    async def deliver_result(self, result: HandedResult, *, msg_id: str, to: str, subject: str,
                             replica: str | None = None) -> None:
        """A step result to the service `to` that applies results: a call when it runs in
        this process (`ResultReceiver.accept_result`), else a request to its `replica` that
        sent the step's work (shared/runtime/direct_results.py), else a work message on
        `subject` (`hand_over`'s policy).

        Called while the step's own delivery is unsettled, so a crash before the result was
        applied redelivers the step, which hands the recorded result over again. A result
        produced by a redelivered chain root is marked *recover* (shared/runtime/chain.py).
        When the call fails, the result is published after its pause and the consumer
        retries it (a result already applied is ignored)."""
        delivery = current_delivery()
        recover = delivery is not None and delivery.redelivered
        await self.hand_over(to, ResultReceiver, lambda receiver: receiver.accept_result(result, recover=recover),
                             subject=subject, envelope=result, msg_id=msg_id, recover=recover, replica=replica)

    async def hand_over(self, to: str, offers: type[P], call: Callable[[P], Awaitable[T]], *, subject: str,
                        envelope: BaseModel, msg_id: str, recover: bool = False,
                        replica: str | None = None) -> T | None:
        """Work for the service `to`: `call(service)` when it runs here and offers `offers`,
        else a request to its `replica` when one is named and answers, else `envelope` as a
        work message on `subject` with `msg_id` (the one policy of shared/runtime/handover.py:
        a call or request that fails is published after its pause, its attempt counted).
        The call's answer, or None when the work went by request or message."""
        target = self.here(to, offers)

        async def publish(attempts: int) -> None:
            await self.bus.publish_work(subject, envelope, msg_id=msg_id, recover=recover, attempts=attempts)
            HOOKS.handed_over(to, "jetstream")

        call_here: Callable[[], Awaitable[T | None]] | None
        if target is not None:
            bound = partial(call, target)

            async def call_here() -> T | None:
                answer = await bound()
                HOOKS.handed_over(to, "process")
                return answer
        elif replica and self.settings.direct_results and not self.stopping:
            direct, data = self.subjects.direct(to, replica), dumps(envelope)
            headers = work_headers(envelope, msg_id, recover=recover)

            async def call_here() -> T | None:
                assert self._direct_requests is not None, "attach_bus first"
                if await request_applied(self._direct_requests, direct, data, headers=headers):
                    HOOKS.handed_over(to, "direct")
                else:  # that replica is gone or stopping
                    await publish(0)
                return None
        else:
            call_here = None
        return await hand_over(call_here, publish, policy=self.policy, what=f"{subject} {msg_id}")

    def here(self, name: str, offers: type[P]) -> P | None:
        """The service `name` when it runs in this process and work may be handed to it as
        a call now (not during a graceful stop), else None; as `offers`, the protocol of what
        may be called on it (shared/runtime/handover.py). A service here that does not offer
        it is a wiring error (TypeError)."""
        service = None if self.stopping else self.local.get(name)
        if service is None:
            return None
        if (type(service), offers) in self._offering:
            return service  # type: ignore[return-value]
        if isinstance(service, offers):
            self._offering.add((type(service), offers))
            return service
        raise TypeError(f"no in-process hand-over to the {name} service ({type(service).__name__})")

    def hand_off(self, subject: str, envelope: Any, msg_id: str) -> bool:
        """Work for `subject` as a task of the current chain when its handler runs in this
        process (shared/runtime/chain.py). False when it must be published instead: no handler
        here, a graceful stop under way, or no chain to hold it (an ingress handler). A
        hop that fails here is published with `msg_id`, as it would have been."""
        handler = None if self.stopping else self.handlers.get(subject)
        if handler is None:
            return False
        # A model is handed over as it is; a dict (a replayed outbox) as its JSON, which
        # the handler validates like any message.
        body = envelope if isinstance(envelope, BaseModel) else dumps(envelope)

        async def publish() -> None:
            await self.bus.publish_work(subject, envelope, msg_id=msg_id, attempts=1)

        return hand_off(handler, body, self.hop_tasks, self.settings.chain_max_hops, self.balance,
                        subject=subject, fallback=publish)

    async def wait_for_hops(self, timeout: float) -> None:
        """Until the handed-off hops in flight have ended (a graceful stop): each hands its
        next hop to JetStream, since `stopping` is set, and its chain settles its root."""
        if self.hop_tasks:
            await asyncio.wait(set(self.hop_tasks), timeout=timeout)

    # -- work consumers -----------------------------------------------------------------
    def work_stream(self) -> str:
        return stream_name(self.settings.subject_prefix, WORK_STREAM)

    def ingress_stream(self) -> str:
        return stream_name(self.settings.subject_prefix, INGRESS_STREAM)

    def work_subscriber(self, subject: str, durable: str, max_workers: int = 64,
                        stream: str | None = None, holds: bool = True,
                        max_deliver: int | None = None, reports: bool = True) -> Callable[[WorkHandler], WorkHandler]:
        """A durable JetStream push consumer shared by every replica (deliver group =
        durable), acked by the handler itself after its effects are durable; consumed with
        nats-py (shared/runtime/work_consumer.py) once `consume()` is called.

        The handler gets a `Delivery`, the root of a work chain (shared/runtime/chain.py): with
        `holds`, hops the router hands off while it runs are tasks under it, and the
        message is acked when the last of them settles. Ingress consumers pass
        `holds=False`. Where in-process hand-overs are on, the handler is also registered
        as this process's handler of `subject`.

        Push with a deliver group rather than pull: a pull consumer costs one fetch round
        trip per message (and nats-py's fetch(batch>1) may wait out its timeout), while a
        push consumer with a queue group balances across replicas at no extra latency.

        Settling is the runner's (shared/runtime/chain.py, `run_handler`) under the one redelivery
        policy (shared/runtime/redelivery.py). `max_deliver` overrides LOOPWIRE_MAX_DELIVER (-1:
        never give up); `reports`: work given up is reported as a dead letter (not for the
        dead-letter consumer itself)."""
        name = self.durable_name(durable)
        stream = stream or self.work_stream()
        self.consumers[durable] = (stream, name)
        config = ConsumerConfig(ack_wait=self.settings.ack_wait_s,
                                max_deliver=self.settings.max_deliver if max_deliver is None else max_deliver,
                                max_ack_pending=10_000, deliver_subject=self.subjects.deliver(name))
        ack_wait_s = self.settings.ack_wait_s
        policy = self.policy
        report = self.report_dead_letter if reports else None

        def decorate(handler: WorkHandler) -> WorkHandler:
            if self.local:
                self.handlers[subject] = handler

            async def consume(root: JetStreamRoot) -> None:
                await run_handler(handler, root_delivery(root, ack_wait_s, holds, policy=policy, report=report))

            self.work_consumers.append(WorkConsumer(subject, stream=stream, durable=name, config=config,
                                                    handle=consume, max_workers=max_workers))
            return handler

        return decorate

    def direct_receiver(self, service: str, apply: Apply) -> None:
        """This replica of `service` takes step results on its direct subject
        (`Subjects.direct`, shared/runtime/direct_results.py) once `consume()` is called."""
        self.direct_receivers.append(DirectReceiver(self.subjects.direct(service, self.replica_id), apply))

    async def consume(self) -> None:
        """Start the work consumers registered so far (the connection is up, the bus
        attached, the streams created), and the direct subjects. Binding a consumer
        (creating it first if no replica has) is retried while JetStream does not answer,
        as the streams were (streams.py)."""
        deadline = time.monotonic() + self.settings.jetstream_ready_timeout_s
        for consumer in self.work_consumers:
            await until_jetstream_answers(f"consumer {consumer.durable}", partial(consumer.start, self.bus.js),
                                          deadline)
        for receiver in self.direct_receivers:
            await receiver.start(self.bus.nc)

    async def stop_consuming(self, timeout: float) -> None:
        """A graceful stop of the work consumers and the direct subjects: none takes new
        work (a direct result finds no responder and goes to JetStream), and the handlers
        in flight get up to `timeout` seconds (together) to finish."""
        await asyncio.gather(*(consumer.stop(timeout) for consumer in self.work_consumers),
                             *(receiver.stop(timeout) for receiver in self.direct_receivers))


def build_context(settings: Settings, broker: NatsBroker) -> ServiceContext:
    redis = connect_configured_redis(settings)
    # Step records, commits and seqs wait for the master's replicas (shared/stores/replication.py);
    # a record is retried through an outage as long as a step's outage is ridden out.
    replication = Replication(redis, wait_replicas(settings), settings.redis_wait_timeout_ms)
    return ServiceContext(
        settings=settings,
        subjects=Subjects(settings.subject_prefix, settings.tenants),
        redis=redis,
        sessions=RedisSessionStore(redis, settings.session_ttl_s, replication),
        steps=RedisStepStore(redis, settings.step_result_ttl_s, replication, patience_s=settings.outage_tolerance_s),
        events=RedisEventLog(redis, settings.session_ttl_s, replication),
        broker=broker,
        blobs=BlobStore(redis, settings.step_result_ttl_s),
        replication=replication,
    )


class Service(Protocol):
    name: str

    def register(self, broker: NatsBroker) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...
