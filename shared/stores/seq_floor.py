"""A session's last published `seq`, read from the LOOPWIRE_EVENTS stream.

Redis holds each session's `seq` counter (shared/stores/event_log.py). A Redis that lost its
data (no persistence, a failover to a replica behind its primary) would start a session
over at `seq` 1 while the events stream, and every client that follows it, still holds
the old ones. So when the router meets a session with no state it reads the last event
the stream holds for it (one direct read of the last message on `<prefix>.out.<sid>.>`)
and the counter continues from there. The read goes to the stream's leader, which holds
every event the stream acknowledged; while a cluster elects one it is asked again
(shared/stores/stream_leader.py), so a lost node never makes the floor read low.
"""

from __future__ import annotations

import contextlib

import orjson
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from loopwire.shared.contract.subjects import EVENTS_STREAM, Subjects, stream_name
from loopwire.shared.stores.stream_leader import ask_leader, jetstream_timeout


async def last_published_seq(js: JetStreamContext, subjects: Subjects, sid: str) -> int:
    """The `seq` of the session's last event in LOOPWIRE_EVENTS; 0 when it has none."""
    try:
        msg = await ask_leader(lambda: js.get_last_msg(stream_name(subjects.prefix, EVENTS_STREAM),
                                                       subjects.session_events(sid)), total_s=jetstream_timeout(js))
    except NotFoundError:
        return 0
    with contextlib.suppress(Exception):
        seq = orjson.loads(msg.data or b"{}").get("seq")
        if isinstance(seq, int):
            return seq
    return 0
