"""JetStream streams, created or brought up to date at start-up, and the retry that
start-up's JetStream requests share.

Every replica of every service does this when it starts, and on Kubernetes they start
together, on a NATS cluster whose meta leader may not be elected yet. So each step is
idempotent and retried: a stream found equal to its configuration is left alone (no
update to race on), one created meanwhile by another process is read again instead of
refused, and a timeout or a cluster that is not ready yet is retried until
LOOPWIRE_JETSTREAM_READY_TIMEOUT_S (`until_jetstream_answers`; the work consumers bind
the same way, shared/runtime/service_context.py: a consumer created by another replica in
the same instant with the same configuration is accepted by the server as the same
request). What can never succeed (a stream whose replicas cannot be changed to
LOOPWIRE_STREAM_REPLICAS, or three replicas on one server) stops the start-up with the
server's reason (StreamSetupError).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from nats import errors as nats_errors
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, BadRequestError, NotFoundError, ServerError

from loopwire.shared.contract.subjects import (
    DEAD_LETTER_STREAM,
    EVENTS_STREAM,
    INGRESS_STREAM,
    MAX_DELIVERIES_ADVISORY,
    WORK_STREAM,
    Subjects,
    stream_name,
)
from loopwire.shared.runtime.settings import RuntimeSettings

__all__ = ["StreamSetupError", "T", "config_differences", "ensure_streams", "is_transient", "log", "stream_configs",
           "until_jetstream_answers"]

log = logging.getLogger("loopwire.streams")

T = TypeVar("T")

STREAM_NAME_IN_USE = 10058
"""JetStream's err_code for an add of a stream that exists (another replica made it)."""
NO_SUITABLE_PEERS = 10005
"""JetStream's err_code for `no suitable peers for placement`: a cluster still forming
has fewer servers than the replicas asked for (retried; at the deadline it is the reason)."""
INSUFFICIENT_RESOURCES = 10023
"""JetStream's err_code for `insufficient resources` (also: too few peers)."""
NOT_CLUSTERED = 10074
"""JetStream's err_code for `replicas > 1 not supported in non-clustered mode`: never
transient (a 500 all the same)."""

MANAGED_FIELDS = ("subjects", "retention", "storage", "max_age", "duplicate_window", "max_msg_size",
                  "num_replicas", "discard")
"""The stream settings loopwire decides; any other (set by an operator) is kept."""


class StreamSetupError(RuntimeError):
    """A stream or consumer cannot be made as configured, or JetStream did not answer
    within LOOPWIRE_JETSTREAM_READY_TIMEOUT_S; the message says why."""


def stream_configs(settings: RuntimeSettings) -> list[StreamConfig]:
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


async def ensure_streams(js: JetStreamContext, settings: RuntimeSettings) -> None:
    """Every loopwire stream exists with its configuration (stream_configs)."""
    deadline = time.monotonic() + settings.jetstream_ready_timeout_s
    for cfg in stream_configs(settings):
        await until_jetstream_answers(f"stream {cfg.name}", partial(_ensure_stream, js, cfg, settings), deadline)


async def _ensure_stream(js: JetStreamContext, cfg: StreamConfig, settings: RuntimeSettings) -> None:
    assert cfg.name is not None
    try:
        info = await js.stream_info(cfg.name)
    except NotFoundError:
        try:
            await js.add_stream(cfg)
            log.info("created stream %s (%d replicas)", cfg.name, cfg.num_replicas)
            return
        except APIError as exc:
            if exc.err_code == NOT_CLUSTERED:
                raise StreamSetupError(f"stream {cfg.name}: LOOPWIRE_STREAM_REPLICAS={settings.stream_replicas}, "
                                       f"but NATS is one server, not a cluster ({exc.description})") from exc
            if exc.err_code != STREAM_NAME_IN_USE:
                raise
            info = await js.stream_info(cfg.name)  # another replica created it meanwhile
    differs = config_differences(cfg, info.config)
    if not differs:
        return
    try:
        await js.update_stream(cfg)
        log.info("updated stream %s: %s", cfg.name, ", ".join(differs))
    except (BadRequestError, ServerError) as exc:
        if is_transient(exc):
            raise
        # Another replica may have made the same update between our read and ours.
        still = config_differences(cfg, (await js.stream_info(cfg.name)).config)
        if "num_replicas" in still:
            raise StreamSetupError(
                f"stream {cfg.name} has {info.config.num_replicas} replica(s) and LOOPWIRE_STREAM_REPLICAS="
                f"{settings.stream_replicas} asks for {cfg.num_replicas}; NATS refused the change: "
                f"{exc.description}") from exc
        if still:
            # e.g. a retention change, which JetStream does not allow on a stream
            log.warning("stream %s exists with another config (%s): %s", cfg.name, ", ".join(still), exc)


def config_differences(wanted: StreamConfig, current: StreamConfig) -> list[str]:
    """The MANAGED_FIELDS in which a stream's current configuration is not `wanted`."""
    def norm(name: str, value: Any) -> Any:
        if name in ("max_age", "duplicate_window"):
            return round(float(value or 0), 3)  # None and 0 both mean "no limit" / the default
        if name == "subjects":
            return sorted(value or [])
        if name == "max_msg_size":
            return value if value and value > 0 else -1
        return value
    return [name for name in MANAGED_FIELDS
            if norm(name, getattr(wanted, name)) != norm(name, getattr(current, name))]


def is_transient(exc: BaseException) -> bool:
    """A JetStream error that goes away by itself on a cluster: a timeout, no responders
    (no meta or stream leader yet), a 5xx answer, too few peers while servers start."""
    if isinstance(exc, (nats_errors.TimeoutError, asyncio.TimeoutError, nats_errors.NoRespondersError,
                        nats_errors.ConnectionReconnectingError)):
        return True
    if isinstance(exc, APIError):
        if exc.err_code == NOT_CLUSTERED:
            return False
        return (exc.code or 0) >= 500 or exc.err_code in (NO_SUITABLE_PEERS, INSUFFICIENT_RESOURCES)
    return False


async def until_jetstream_answers(what: str, attempt: Callable[[], Awaitable[T]], deadline: float) -> T:
    """`attempt()` until it returns, retrying transient errors with a growing pause until
    `deadline`, when the last error is the reason given."""
    delay = 0.2
    said = 0.0
    while True:
        try:
            return await attempt()
        except Exception as exc:
            if not is_transient(exc):
                raise
            now = time.monotonic()
            if now + delay > deadline:
                raise StreamSetupError(f"JetStream did not set up {what} in time (LOOPWIRE_JETSTREAM_READY_"
                                       f"TIMEOUT_S): {type(exc).__name__}: {exc}") from exc
            if now - said >= 5.0:
                said = now
                log.warning("JetStream not ready for %s (%s: %s); retrying", what, type(exc).__name__, exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
