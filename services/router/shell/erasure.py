"""`<prefix>.api.session.delete` and `<prefix>.api.user.erase` (docs/protocol.md, "Deleting
and exporting a session"): a session removed from every store loopwire keeps, with a
receipt of what each store let go, and every session of one user.

The router owns session state, so it answers (one queue group across its replicas; with
tenants also on `<prefix>.api.<tenant>.…`, for that tenant's sessions only). One delete:

1. ends a run in progress as an abort does (its in-flight steps get the cancel notice;
   their late results find no run and are dropped, and a cancelled tool call is never
   recorded);
2. marks the session deleted, a tombstone in its state document (`"deleted": true`,
   session_state.DELETED), committed behind the version like any transition: from then on
   every reader takes it for a session that does not exist (`session.get` answers
   `unknown`, an input is dropped, a fork of it is refused `unknown_session`), and another
   replica's commit of a transition it decided before fails its version check;
3. removes it from every other store (shared/stores/erasure.py): its own keys, its entries
   in the indexes, its large content no session of its lineage shares, its messages in the
   events and ingress streams; its forks stay, told their source is gone;
4. deletes the tombstone last.

A delete cut short anywhere (a kill -9 of the router) leaves the tombstone: the session
stays gone, and the same request again finds the tombstone, skips 1-2 and completes 3-4.
A later sweep (LOOPWIRE_DELETE_SETTLE_S after) removes what a step in flight wrote after the delete.

Every delete leaves an audit record (keys.DELETE_AUDIT, and a log line): who asked, when,
which stores and how many records, the session named by an HMAC of its id (keyed by
LOOPWIRE_AUDIT_HMAC_KEY, else the deployment's random key), never by its id or content.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from faststream.nats import NatsBroker

from loopwire.shared.contract import codec, keys
from loopwire.shared.contract.codec import now_rfc3339
from loopwire.shared.contract.protocol import (
    PROTOCOL_VERSION,
    Abort,
    SessionDeleteRequest,
    UserEraseRequest,
    error_reply,
)
from loopwire.shared.contract.query_replies import SessionDeleted, StoreRemoved, UserErased
from loopwire.shared.contract.session_state import DELETED, is_deleted, stored_state
from loopwire.shared.contract.subjects import tenant_of
from loopwire.shared.runtime.query_handler import QueryHandler, query_handler
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.capabilities import Capability
from loopwire.shared.stores.erasure import (
    SessionKeys,
    lineage_blobs,
    purge_session_messages,
    receipt,
    remove_actor_notes,
    remove_blobs,
    remove_index_entries,
)

from ..core.inputs import AbortInput
from ..core.settings import RouterSettings

log = logging.getLogger("loopwire.router.erasure")

DELETES_AT_ONCE = 4
"""Delete requests one router replica works on at the same time."""
TOMBSTONE_ATTEMPTS = 20
"""Commits the tombstone (or a fork's note) tries against a session another replica keeps
moving, before the delete answers `busy`."""
AUDIT_KEEP = 10_000
"""Audit records kept in keys.DELETE_AUDIT (the log keeps them all)."""

ApplyInput = Callable[[str, AbortInput], Awaitable[Any]]


class EraseRefused(Exception):
    """The error reply a delete or erase request gets (`code`, message)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ErasureQueries:
    """The delete and erase queries of one router replica. `abort(sid, input)`: the shell's
    own application of an input (its lock, its commit); `forget(sid)`: drop the replica's
    cached state of the session."""

    def __init__(self, ctx: ServiceContext[RouterSettings], abort: ApplyInput,
                 forget: Callable[[str], object]) -> None:
        self.ctx = ctx
        self._abort = abort
        self._forget = forget
        self._settling: set[asyncio.Task[None]] = set()

    def register(self, broker: NatsBroker) -> None:
        subjects, settings = self.ctx.subjects, self.ctx.settings
        queue = f"{settings.subject_prefix}-router"
        for name, model, answer in (
            ("session.delete", SessionDeleteRequest, self._on_delete),
            ("user.erase", UserEraseRequest, self._on_erase),
        ):
            for scoped in (False, True) if settings.tenants else (False,):
                broker.subscriber(
                    subjects.query(name, tenant="*" if scoped else None),
                    queue=queue,
                    max_workers=DELETES_AT_ONCE,
                )(self._handler(name, model, answer, scoped=scoped))

    def _handler(
        self, name: str, model: type[Any], answer: Callable[[Any, str | None], Awaitable[Any]], *, scoped: bool
    ) -> QueryHandler:
        def refused(exc: Exception) -> dict[str, Any] | None:
            return error_reply(exc.code, str(exc)) if isinstance(exc, EraseRefused) else None

        return query_handler(
            name,
            model,
            answer,
            subjects=self.ctx.subjects,
            settings=self.ctx.settings,
            tenant_scoped=scoped,
            refusal=refused,
        )

    async def stop(self) -> None:
        for task in list(self._settling):
            task.cancel()

    async def _on_delete(self, req: SessionDeleteRequest, tenant: str | None) -> SessionDeleted:
        return await self.delete(req.session_id, by=_who(tenant))

    async def _on_erase(self, req: UserEraseRequest, tenant: str | None) -> UserErased:
        if tenant is not None and req.tenant not in (None, tenant):
            raise EraseRefused("forbidden", f"tenant {tenant} may erase only its own sessions")
        return await self.erase(req.user_id, tenant=tenant or req.tenant, by=_who(tenant))

    # -- user.erase ---------------------------------------------------------------------------
    async def erase(self, user_id: str, *, tenant: str | None, by: str) -> UserErased:
        """Every session whose runs carried `user_id` (of `tenant` only, when given), deleted."""
        redis = self.ctx.redis
        if tenant is not None:
            tenants = [tenant]
        elif self.ctx.settings.tenants:
            tenants = sorted(_text(t) for t in await redis.smembers(keys.USER_TENANTS))  # type: ignore[misc]
        else:
            tenants = ["*"]
        sids: set[str] = set()
        for t in tenants:
            sids |= {_text(s) for s in await redis.smembers(keys.user_sessions(t, user_id))}  # type: ignore[misc]
        replies = [await self.delete(sid, by=by) for sid in sorted(sids)]
        for t in tenants:  # what is left of it names sessions no longer there
            await redis.delete(keys.user_sessions(t, user_id))
        log.info("user erase by %s: %d session(s) deleted", by, sum(1 for r in replies if r["deleted"]))
        return {"v": PROTOCOL_VERSION, "user_id": user_id, "sessions": replies}

    # -- session.delete -----------------------------------------------------------------------
    async def delete(self, sid: str, *, by: str) -> SessionDeleted:
        sessions = self.ctx.sessions
        raw, _version = await sessions.load(sid)
        resumed = is_deleted(raw)
        if raw is not None and not resumed:
            if stored_state(raw).status != "idle":
                await self._abort(
                    sid,
                    AbortInput(input_id=f"delete:{uuid.uuid4().hex}", body=Abort(reason="session deleted")),
                )
            raw = await self._tombstone(sid)
        self._forget(sid)
        await self._cancel_in_flight(sid)
        counts = await self.sweep(sid, raw)
        deleted = raw is not None or sum(counts.values()) > 0
        stores = receipt(counts)
        await self._audit(sid, by=by, deleted=deleted, resumed=resumed, stores=stores)
        if deleted and self.ctx.settings.delete_settle_s > 0:
            task = asyncio.get_running_loop().create_task(self._settle(sid))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)
        return {
            "v": PROTOCOL_VERSION,
            "session_id": sid,
            "deleted": deleted,
            "stores": stores,
            # addition: a delete that finished one cut short before
            "resumed": resumed,
        }

    async def _tombstone(self, sid: str) -> dict[str, Any] | None:
        """Mark the session deleted behind its version; the state as it was, marked (None:
        it vanished meanwhile)."""
        sessions = self.ctx.sessions
        for _ in range(TOMBSTONE_ATTEMPTS):
            raw, version = await sessions.load(sid)
            if raw is None or is_deleted(raw):
                return raw
            marked = {**raw, DELETED: True}
            if await sessions.commit(
                sid, version, marked, history_len_before=stored_state(raw).history_len, append=[]
            ):
                return marked
        raise EraseRefused("busy", f"session {sid!r} kept changing; ask again")

    async def _cancel_in_flight(self, sid: str) -> None:
        """The cancel notice to every step of the session still in flight (the abort sent it
        for the run it ended; a step of an earlier run may be running late)."""
        try:
            await self.ctx.bus.nc.publish(self.ctx.subjects.cancel(sid), b"{}")
        except Exception as exc:  # best effort, as every cancel notice
            log.warning("session delete: the cancel notice was not sent: %s", exc)

    async def sweep(self, sid: str, raw: dict[str, Any] | None) -> Counter[str]:
        """Everything of the session out of every store, its state key last; what each held."""
        if not self.ctx.sessions.supports(Capability.PIPELINED_HISTORY):
            return await self._sweep_in_memory(sid, raw)
        redis = self.ctx.redis
        state_key = keys.session_state(sid)
        forked_from = stored_state(raw).forked_from if raw is not None else None
        source = (forked_from.session_id or None) if forked_from is not None else None
        forks = await self.ctx.sessions.forks(sid)
        found = await SessionKeys.read(redis, sid)
        shared = await lineage_blobs(redis, [s for s in (source, *forks) if s is not None])
        counts = await remove_index_entries(redis, sid, user_ids=found.user_ids(), source=source)
        counts["memory"] += await remove_actor_notes(redis, found.notes())
        counts["blobs"] += await remove_blobs(redis, found.blobs() - shared)
        await self._tell_forks(forks, sid)
        counts += await purge_session_messages(self.ctx.bus.js, self.ctx.subjects, sid)
        counts += await found.delete(redis, last=state_key)
        return counts

    async def _sweep_in_memory(self, sid: str, raw: dict[str, Any] | None) -> Counter[str]:
        counts: Counter[str] = Counter()
        history = await self.ctx.sessions.history(sid)
        events = await self.ctx.events.read(sid, 0, 1_000_000)
        await self.ctx.events.delete(sid)
        await self.ctx.sessions.delete(sid)
        counts.update(
            {"session_state": int(raw is not None), "history": len(history), "event_log": len(events)}
        )
        return counts

    async def _tell_forks(self, forks: list[str], sid: str) -> None:
        """Each fork of the session keeps its history and says its source is gone: its
        `forked_from` names no session any more (an empty id, `source_gone`)."""
        sessions = self.ctx.sessions
        for fork in forks:
            for _ in range(TOMBSTONE_ATTEMPTS):
                raw, version = await sessions.load(fork)
                if (
                    raw is None
                    or is_deleted(raw)
                    or not isinstance(raw.get("forked_from"), dict)
                    or raw["forked_from"].get("session_id") != sid
                ):
                    break
                told = {**raw, "forked_from": {**raw["forked_from"], "session_id": "", "source_gone": True}}
                if await sessions.commit(
                    fork, version, told, history_len_before=stored_state(raw).history_len, append=[]
                ):
                    self._forget(fork)
                    break

    async def _settle(self, sid: str) -> None:
        await asyncio.sleep(self.ctx.settings.delete_settle_s)
        try:
            raw, _ = await self.ctx.sessions.load(sid)
            if raw is not None and not is_deleted(raw):
                return  # a new session of the same id: its own now
            late = await self.sweep(sid, raw)
            if sum(late.values()):
                log.info("session delete: %d late record(s) of a deleted session removed", sum(late.values()))
        except Exception as exc:
            log.warning("session delete: the later sweep failed (%s); a delete again repeats it", exc)

    # -- the audit ------------------------------------------------------------------------------
    async def _audit(
        self, sid: str, *, by: str, deleted: bool, resumed: bool, stores: list[StoreRemoved]
    ) -> None:
        record = {
            "at": now_rfc3339(),
            "by": by,
            "session": await self._hashed(sid),
            "deleted": deleted,
            "resumed": resumed,
            "stores": {s["store"]: s["removed"] for s in stores},
        }
        log.info("session delete audit: %s", orjson.dumps(record).decode())
        if self.ctx.sessions.supports(Capability.PIPELINED_HISTORY):
            pipe = self.ctx.redis.pipeline(transaction=False)
            pipe.lpush(keys.DELETE_AUDIT, codec.dumps(record))
            pipe.ltrim(keys.DELETE_AUDIT, 0, AUDIT_KEEP - 1)
            await pipe.execute()

    async def _hashed(self, sid: str) -> str:
        return hmac.new(await self._audit_key(), sid.encode(), hashlib.sha256).hexdigest()[:32]

    async def _audit_key(self) -> bytes:
        configured = self.ctx.settings.audit_hmac_key
        if configured is not None:
            return configured.encode()
        if not self.ctx.sessions.supports(Capability.PIPELINED_HISTORY):
            return b"in-memory"
        redis = self.ctx.redis
        await redis.set(keys.AUDIT_SECRET, secrets.token_hex(32), nx=True)
        key = await redis.get(keys.AUDIT_SECRET)
        return key if isinstance(key, bytes) else str(key).encode()


async def note_user(ctx: ServiceContext[RouterSettings], sid: str, user_id: str) -> None:
    """Index the session under the `user_id` a run of it carried (StartRun), for
    `user.erase`: the user's sessions of its tenant, and the session's own user ids (which
    a delete reads to take it out of each index)."""
    if not ctx.sessions.supports(Capability.PIPELINED_HISTORY):
        return  # in-memory stores: no index to keep
    tenant = tenant_of(sid) or "*"
    ttl = ctx.settings.session_ttl_s
    pipe = ctx.redis.pipeline(transaction=False)
    pipe.sadd(keys.user_sessions(tenant, user_id), sid)
    pipe.sadd(keys.session_users(sid), user_id)
    pipe.sadd(keys.USER_TENANTS, tenant)
    if ttl:
        pipe.expire(keys.user_sessions(tenant, user_id), ttl)
        pipe.expire(keys.session_users(sid), ttl)
    await pipe.execute()


def _who(tenant: str | None) -> str:
    """Who asked, as the subject says (NATS permissions restrict it): a tenant, else an operator."""
    return f"tenant:{tenant}" if tenant is not None else "operator"


def _text(raw: bytes | str) -> str:
    return raw.decode() if isinstance(raw, bytes) else raw
