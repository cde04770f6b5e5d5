"""Per-session order of ingress across router replicas: stream-order sequencing.

Every router replica takes ingress from one shared durable consumer, so two inputs of one
session (a `start`, then a `message` published once the `start` was acknowledged) can
reach two replicas at once, and the later one could be applied first. The session's
state therefore records the stream sequence of the last ingress message applied to it
(`SessionState.ingress_seq`), and a replica that is about to apply ingress seq S of
session X first reads the stream for X's messages between that position and S
(`<prefix>.in.X.*`, one `next_by_subj` get per message) and applies them, in stream order,
under the same per-session compare-and-set. Whichever replica gets a message applies the
backlog before it; a message found applied already changes nothing. There is no lease,
no partition map and nothing to rebalance: a replica that dies leaves its messages
unacked (JetStream redelivers them) and whatever it committed is the position the next
one reads from. docs/architecture.md says why this design and what it costs.

The reads go to the stream leader (`STREAM.MSG.GET`, not a direct get): a direct get may
be answered by a replica of the stream that lags, which could hide an earlier message.
While a cluster elects a new leader for the stream (its node was lost) a read is asked
again (shared/stores/stream_leader.py); the leader a read reaches has every message the
stream acknowledged, so the order holds across the change.

A new session (no position yet) starts from the ingress consumer's ack floor: every
message at or below it was acked, and the router acks ingress only after applying it.
The floor is read at most once a second and only for such sessions.

A session rebuilt from its transcript has no position either, but every input before
the next one applied is in its transcript already: that one is applied without a backlog
read (`SessionState.rebuilt`; docs/architecture.md says what that gives up).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from loopwire.shared.stores.stream_leader import ask_leader, jetstream_timeout

FLOOR_MAX_AGE_S = 1.0
"""How old an ack floor may be before it is read again (a lower, older floor only means
a few already-applied messages of a new session are decided again, as no-ops)."""


@dataclass(frozen=True)
class IngressMessage:
    seq: int
    subject: str
    data: bytes
    headers: dict[str, str] | None


class IngressReader:
    """Reads a session's ingress messages from LOOPWIRE_INGRESS by stream sequence."""

    def __init__(self, js: JetStreamContext, *, stream: str, consumer: str, ingress_prefix: str) -> None:
        self._js = js
        self._stream = stream
        self._consumer = consumer
        self._prefix = ingress_prefix
        """`<prefix>.in`: a session's ingress subjects are `<prefix>.in.<sid>.<verb>`."""
        self._floor = 0
        self._floor_read_at = float("-inf")
        self._timeout_s = jetstream_timeout(js)

    async def next_after(self, sid: str, after: int) -> IngressMessage | None:
        """The session's first ingress message with a stream sequence above `after`."""
        try:
            raw = await ask_leader(lambda: self._js.get_msg(
                self._stream, seq=after + 1, subject=f"{self._prefix}.{sid}.*", next=True), total_s=self._timeout_s)
        except NotFoundError:
            return None
        if raw.seq is None or raw.subject is None:
            return None
        return IngressMessage(seq=raw.seq, subject=raw.subject, data=raw.data or b"", headers=raw.headers)

    async def ack_floor(self) -> int:
        """The ingress consumer's ack floor (stream sequence), at most FLOOR_MAX_AGE_S old."""
        now = time.monotonic()
        if now - self._floor_read_at >= FLOOR_MAX_AGE_S:
            info = await ask_leader(lambda: self._js.consumer_info(self._stream, self._consumer),
                                    total_s=self._timeout_s)
            floor = info.ack_floor.stream_seq if info.ack_floor is not None else 0
            self._floor = max(self._floor, floor or 0)
            self._floor_read_at = now
        return self._floor
