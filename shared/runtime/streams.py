"""JetStream streams and consumers, created at start-up when missing (idempotent)."""

from __future__ import annotations

import logging

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError

from loopwire.shared.contract.subjects import (
    DEAD_LETTER_STREAM,
    EVENTS_STREAM,
    INGRESS_STREAM,
    MAX_DELIVERIES_ADVISORY,
    WORK_STREAM,
    Subjects,
    stream_name,
)
from loopwire.shared.runtime.settings import Settings

log = logging.getLogger("loopwire.streams")


def stream_configs(settings: Settings) -> list[StreamConfig]:
    subjects = Subjects(settings.subject_prefix)
    prefix = settings.subject_prefix
    return [
        # Ingress keeps what users sent for a day by default (an audit trail and a replay
        # source); the router's durable consumer tracks what it has applied.
        StreamConfig(
            name=stream_name(prefix, INGRESS_STREAM), subjects=[subjects.ingress_all],
            retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
            max_age=settings.ingress_max_age_s or None, duplicate_window=settings.dedup_window_s,
            max_msg_size=max(settings.max_body_bytes * 4, 1024 * 1024),
            num_replicas=settings.stream_replicas, discard=DiscardPolicy.OLD,
        ),
        StreamConfig(
            name=stream_name(prefix, EVENTS_STREAM), subjects=[subjects.events_all],
            retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
            max_age=settings.events_max_age_s or None, duplicate_window=settings.dedup_window_s,
            num_replicas=settings.stream_replicas, discard=DiscardPolicy.OLD,
        ),
        # Work between services: each message is taken by exactly one consumer and
        # removed when acked; one that outlived every delivery attempt ages out.
        StreamConfig(
            name=stream_name(prefix, WORK_STREAM), subjects=[subjects.work_all],
            retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE,
            max_age=settings.work_max_age_s or None, duplicate_window=settings.dedup_window_s,
            num_replicas=settings.stream_replicas, discard=DiscardPolicy.OLD,
        ),
        # Work given up (shared/runtime/redelivery.py): the handlers' own dead letters and the
        # server's max-deliveries advisories of the two streams whose consumers can give
        # up, kept until the router has ended their runs (shared/runtime/dead_letters.py).
        StreamConfig(
            name=stream_name(prefix, DEAD_LETTER_STREAM),
            subjects=[subjects.dead_letter] + [
                f"{MAX_DELIVERIES_ADVISORY}.{stream_name(prefix, base)}.*" for base in (INGRESS_STREAM, WORK_STREAM)],
            retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE,
            max_age=settings.work_max_age_s or None, duplicate_window=settings.dedup_window_s,
            num_replicas=settings.stream_replicas, discard=DiscardPolicy.OLD,
        ),
    ]


async def ensure_streams(js: JetStreamContext, settings: Settings) -> None:
    for cfg in stream_configs(settings):
        assert cfg.name is not None
        try:
            await js.stream_info(cfg.name)
            try:
                await js.update_stream(cfg)
            except BadRequestError as exc:  # e.g. a retention change is not allowed
                log.warning("stream %s exists with another config: %s", cfg.name, exc)
        except NotFoundError:
            try:
                await js.add_stream(cfg)
            except BadRequestError as exc:
                # Another replica created it between our look and our add.
                if "already in use" not in str(exc):
                    raise


def work_consumer_config(durable: str, subject: str, settings: Settings,
                         max_ack_pending: int = 10_000) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=durable, filter_subject=subject, ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL, ack_wait=settings.ack_wait_s,
        max_deliver=settings.max_deliver, max_ack_pending=max_ack_pending,
    )
