"""What every service is given: settings, stores, the broker and the publishing bus.

A service is a class with `register(broker)` (its work handlers, through `work_subscriber`,
and its FastStream handlers of queries and RPC), `start()` (after the connection is up:
background tasks) and `stop()`. `loopwire up` runs all five on one
broker connection; `loopwire serve NAME` runs one. See loopwire/launcher.py. What one service
sends another goes through `dispatch` (shared/runtime/dispatcher.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, Protocol, TypeVar

import redis.asyncio as aioredis
from faststream.nats import NatsBroker
from nats.js.api import ConsumerConfig

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.subjects import INGRESS_STREAM, WORK_STREAM, Subjects, stream_name
from loopwire.shared.runtime.bus import Bus
from loopwire.shared.runtime.chain import WorkHandler, run_handler
from loopwire.shared.runtime.credentials import connect_configured_redis, wait_replicas
from loopwire.shared.runtime.direct_results import Apply, DirectReceiver
from loopwire.shared.runtime.dispatcher import Dispatcher
from loopwire.shared.runtime.redelivery import DeadLetter, RedeliveryPolicy
from loopwire.shared.runtime.settings import RuntimeSettings
from loopwire.shared.runtime.streams import until_jetstream_answers
from loopwire.shared.runtime.work_consumer import JetStreamRoot, WorkConsumer, root_delivery
from loopwire.shared.stores.blobs import BlobStore
from loopwire.shared.stores.event_log import EventLogStore, RedisEventLog
from loopwire.shared.stores.replication import Replication
from loopwire.shared.stores.session_store import RedisSessionStore, SessionStore
from loopwire.shared.stores.step_store import RedisStepStore, StepStore

__all__ = ["Service", "ServiceContext", "T", "build_context", "log"]

log = logging.getLogger("loopwire.runtime")

S = TypeVar("S", bound=RuntimeSettings, covariant=True)
"""The settings a context holds: a service types its context with its own settings class
(`ServiceContext[RouterSettings]`), and a process's one `Settings` (loopwire/settings.py)
is every service's, so one context serves them all."""
T = TypeVar("T", bound=RuntimeSettings)
"""build_context's: the context holds the settings class it is given."""


@dataclass
class ServiceContext(Generic[S]):
    settings: S
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
    consumers: dict[str, tuple[str, str]] = field(default_factory=dict)
    """label -> (stream, durable) of every work consumer registered in this process."""
    work_consumers: list[WorkConsumer] = field(default_factory=list)
    """Those consumers, started by `consume()` (shared/runtime/work_consumer.py)."""
    policy: RedeliveryPolicy = field(default_factory=RedeliveryPolicy)
    """The one redelivery policy of every work handler (shared/runtime/redelivery.py)."""
    replica_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    """This process's name among the replicas: where the step results of the work its
    router sends come back to (shared/runtime/direct_results.py)."""
    direct_receivers: list[DirectReceiver] = field(default_factory=list)
    """This process's direct subjects, started by `consume()`, stopped first by `stop_consuming()`."""
    dispatch: Dispatcher = field(init=False, repr=False)
    """How this process's services send each other envelopes (shared/runtime/dispatcher.py)."""

    def __post_init__(self) -> None:
        s = self.settings
        self.policy = RedeliveryPolicy(tolerance_s=s.outage_tolerance_s, max_deliver=s.max_deliver,
                                       fault_max_deliver=s.fault_max_deliver)
        self.dispatch = Dispatcher(self.subjects, policy=self.policy, replica_id=self.replica_id,
                                   direct_results=s.direct_results, chain_max_hops=s.chain_max_hops,
                                   direct_timeout_s=s.direct_result_timeout_s,
                                   summary_timeout_s=s.memory_summary_timeout_s)
        if self._bus is not None:  # a test's bus
            self.dispatch._bus = self._bus

    async def report_dead_letter(self, letter: DeadLetter) -> None:
        """Work given up by a handler, to the router's dead-letter consumer (JetStream,
        LOOPWIRE_DEADLETTERS): its run ends `failed` with an `error` `undeliverable`."""
        msg_id = message_ids.dead_letter_msg_id(stream=letter.stream, stream_seq=letter.stream_seq, subject=letter.subject,
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
        self.dispatch.attach(self._bus)
        return self._bus

    # -- work consumers -----------------------------------------------------------------
    def work_stream(self) -> str:
        return stream_name(self.settings.subject_prefix, WORK_STREAM)

    def ingress_stream(self) -> str:
        return stream_name(self.settings.subject_prefix, INGRESS_STREAM)

    def work_subscriber(self, subject: str, durable: str, max_workers: int = 64,
                        *, stream: str | None = None, holds: bool = True,
                        max_deliver: int | None = None, reports: bool = True) -> Callable[[WorkHandler], WorkHandler]:
        """A durable JetStream push consumer shared by every replica (deliver group =
        durable), acked by the handler itself after its effects are durable; consumed with
        nats-py (shared/runtime/work_consumer.py) once `consume()` is called.

        The handler gets a `Delivery`, the root of a work chain (shared/runtime/chain.py): with
        `holds`, hops the router hands off while it runs are tasks under it, and the
        message is acked when the last of them settles. Ingress consumers pass
        `holds=False`. The handler is also this process's handler of `subject` for the
        dispatcher's in-process hand-offs (dispatcher.py).

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
            self.dispatch.take(subject, handler)

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


def build_context(settings: T, broker: NatsBroker) -> ServiceContext[T]:
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
