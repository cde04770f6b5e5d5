"""A session's events as the LOOPWIRE_EVENTS stream retained them: the transcript's second copy.

The event log in Redis (event_log.py) is what `transcript.get` reads and what a session
is rebuilt from (services/router/shell/rebuild.py, replaying it with shared/stores/transcript.py). Every event is also published to the
JetStream stream LOOPWIRE_EVENTS, which keeps it on disk independently of Redis (for
`LOOPWIRE_EVENTS_MAX_AGE_S`, by default for good). When Redis has lost a session's log
(its data was flushed, lost with an unpersisted restart, or aged out), the stream still
has it: `read_archive` reads it back, in `seq` order, without `text.delta` (ephemeral:
never part of a transcript).

A session that never ran (every new session: the router asks before creating one)
costs one direct read of the stream's last `run.started` of that session, a lookup by
literal subject; only a session that has one is read in full, with an ephemeral pull
consumer filtered on the session's subjects, with no acks, fetched in batches of exactly
what is pending (a batch larger than what is left would wait for its whole timeout), and
deleted when done.
"""

from __future__ import annotations

import contextlib
import logging
from typing import cast

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from loopwire.shared.contract import codec
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.subjects import EVENTS_STREAM, Subjects, stream_name
from loopwire.shared.stores.stream_leader import ask_leader, jetstream_timeout

log = logging.getLogger("loopwire.event_archive")

BATCH = 256
FETCH_TIMEOUT_S = 5.0
INACTIVE_S = 30.0
"""The server removes the consumer by itself when a reader died before deleting it."""


async def read_archive(js: JetStreamContext, subjects: Subjects, sid: str) -> list[AnyEvent]:
    """Every durable event of session `sid` in LOOPWIRE_EVENTS, in `seq` order (each
    seq once: a republished event is the same event). Empty when the stream holds none."""
    stream = stream_name(subjects.prefix, EVENTS_STREAM)
    try:
        await ask_leader(lambda: js.get_last_msg(stream, subjects.event(sid, "run.started")),
                         total_s=jetstream_timeout(js))
    except NotFoundError:
        return []  # no run ever started on this session (or no such stream): nothing to read
    try:
        sub = await js.pull_subscribe(subjects.session_events(sid), stream=stream, config=ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE, inactive_threshold=INACTIVE_S,
            mem_storage=True))
    except NotFoundError:
        return []  # no such stream (yet): nothing was ever archived
    by_seq: dict[int, AnyEvent] = {}
    consumer: str | None = None
    try:
        info = await sub.consumer_info()
        consumer, pending = info.name, info.num_pending or 0
        while pending > 0:
            try:
                msgs = await sub.fetch(min(pending, BATCH), timeout=FETCH_TIMEOUT_S)
            except NatsTimeoutError:
                log.warning("session %s: the events stream stopped answering with %d events left", sid, pending)
                break
            for msg in msgs:
                pending = msg.metadata.num_pending
                event = codec.loads(msg.data)
                if isinstance(event, dict) and event.get("kind") != "text.delta" and isinstance(event.get("seq"), int):
                    # A JSON object with a seq on the events stream: an event a loopwire emitter published.
                    by_seq[event["seq"]] = cast(AnyEvent, event)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        if consumer is not None:
            with contextlib.suppress(Exception):
                await js.delete_consumer(stream, consumer)
    return [by_seq[s] for s in sorted(by_seq)]
