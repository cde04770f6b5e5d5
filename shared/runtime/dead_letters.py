"""Reading dead letters: work that will not be delivered again.

Two kinds arrive in LOOPWIRE_DEADLETTERS (shared/runtime/streams.py):

- a handler's own `DeadLetter` on `<prefix>.deadletter` (shared/runtime/redelivery.py: a fault
  that kept repeating, a body that can never decode), which names the session, run and
  step itself;
- nats-server's advisory `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>`
  for a message that reached its consumer's max deliveries (handlers kept meeting an outage
  for longer than LOOPWIRE_OUTAGE_TOLERANCE_S, or the processes handling it kept dying).
  The advisory carries the stream sequence; the message itself is still in its stream, so
  its subject, headers and body are read back from there.

The router's consumer of that stream (services/router/shell/service.py) turns each into an
input of its core: the run ends `failed` with an `error` event `undeliverable`, and the
session takes new input again.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import orjson
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from loopwire.shared.contract.headers import RUN_HEADER, SESSION_HEADER
from loopwire.shared.runtime.redelivery import DeadLetter
from loopwire.shared.stores.stream_leader import ask_leader, jetstream_timeout

__all__ = ["discard_original", "log", "original_body", "read_dead_letter", "work_label"]

log = logging.getLogger("loopwire.dead_letters")

MAX_DELIVER_TYPE = "io.nats.jetstream.advisory.v1.max_deliver"


async def read_dead_letter(js: JetStreamContext, data: bytes) -> DeadLetter | None:
    """The dead letter a message of LOOPWIRE_DEADLETTERS stands for; None when it names
    nothing that can be found any more (the message aged out of its stream)."""
    body: Any = orjson.loads(data)
    if not isinstance(body, dict):
        raise ValueError("a dead letter is a JSON object")
    if body.get("type") != MAX_DELIVER_TYPE:
        return DeadLetter.model_validate(body)
    stream, seq = str(body.get("stream", "")), int(body.get("stream_seq", 0))
    letter = DeadLetter(stream=stream, stream_seq=seq, consumer=str(body.get("consumer", "")),
                        deliveries=int(body.get("deliveries", 0)), reason="max_deliveries")
    try:
        original = await ask_leader(lambda: js.get_msg(stream, seq), total_s=jetstream_timeout(js))
    except NotFoundError:
        log.warning("dead letter %s:%d: the message is no longer in its stream", stream, seq)
        return None
    letter.subject = original.subject or ""
    headers = original.headers or {}
    letter.session_id = headers.get(SESSION_HEADER)
    letter.run_id = headers.get(RUN_HEADER)
    with contextlib.suppress(Exception):
        envelope = orjson.loads(original.data or b"")
        if isinstance(envelope, dict):
            letter.session_id = letter.session_id or _text(envelope.get("session_id"))
            letter.run_id = letter.run_id or _text(envelope.get("run_id"))
            letter.step_id = _text(envelope.get("step_id"))
    return letter


async def original_body(js: JetStreamContext, letter: DeadLetter) -> bytes | None:
    """The body of the message a dead letter stands for, when it is still in its stream."""
    if not letter.stream or not letter.stream_seq:
        return None
    try:
        found = await ask_leader(lambda: js.get_msg(letter.stream, letter.stream_seq), total_s=jetstream_timeout(js))
        return found.data or b""
    except NotFoundError:
        return None


async def discard_original(js: JetStreamContext, letter: DeadLetter) -> None:
    """Remove a given-up work message from its (work-queue) stream, which would otherwise
    keep it until LOOPWIRE_WORK_MAX_AGE_S."""
    if letter.stream and letter.stream_seq:
        with contextlib.suppress(NotFoundError):
            await js.delete_msg(letter.stream, letter.stream_seq)


def work_label(subject: str, prefix: str) -> str:
    """The `target` label of loopwire_dead_letters_total: `memory.assemble`, `ingress`, ..."""
    if subject.startswith(f"{prefix}.work."):
        return subject[len(prefix) + 6:]
    if subject.startswith(f"{prefix}.in."):
        return "ingress"
    return "unknown"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
