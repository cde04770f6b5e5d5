"""The router's shell: decode, call the core, commit, perform the effects, ack.

Two durable consumers feed it: ingress (`<prefix>.in.>` in LOOPWIRE_INGRESS) and step
results (`<prefix>.work.router.result` in LOOPWIRE_WORK); a third reads the dead letters.
For each input the shell reads what the core needs from the outside world
(input_lookups.py), loads the session, asks `decide` (core/decide.py), commits the new state with the
history it appends in one compare-and-set (retrying on a conflict with another replica),
performs the effects (effect_publishing.py), and only then acks. A crash anywhere before
the ack redelivers the input; the core recognises it and the outbox is performed again,
idempotently.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import orjson
from faststream.nats import NatsBroker
from pydantic import ValidationError

from loopwire.shared.contract import message_ids
from loopwire.shared.contract.envelopes import (
    STEP_RESULT_ADAPTER,
    ExecutorPermission,
    GenerationResult,
    HandedResult,
    TenantAdmission,
    ToolCallFinished,
)
from loopwire.shared.contract.events import AnyEvent
from loopwire.shared.contract.session_state import SessionState, is_deleted
from loopwire.shared.contract.subjects import (
    DEAD_LETTER_STREAM,
    MAX_DELIVERIES_ADVISORY,
    stream_name,
)
from loopwire.shared.observability import metrics
from loopwire.shared.observability.tracing import new_run_trace
from loopwire.shared.runtime.bus import RECOVER_HEADER, event_items
from loopwire.shared.runtime.chain import Delivery
from loopwire.shared.runtime.dispatcher import RESULTS
from loopwire.shared.runtime.keyed_lock import KeyedLock
from loopwire.shared.runtime.lru import LruCache
from loopwire.shared.runtime.redelivery import CommitContention, Undeliverable
from loopwire.shared.runtime.service_context import ServiceContext
from loopwire.shared.stores.capabilities import Capability
from loopwire.shared.stores.event_archive import read_archive
from loopwire.shared.stores.seq_floor import last_published_seq

from ..core import subagent
from ..core.config import CoreConfig, executor_stall_after, stall_after
from ..core.decide import Decision, decide
from ..core.ingress import check_session_id, decode_ingress
from ..core.inputs import (
    BaseInput,
    CallFinishedInput,
    GenerationInput,
    PermissionInput,
    RejectedInput,
    StartInput,
    ToolsInput,
)
from ..core.settings import RouterSettings
from .dead_letter_inputs import DeadLetterInputs
from .decision_telemetry import count_approvals, count_decision, record_ended_runs
from .effect_publishing import EffectPublisher, leading_events
from .erasure import ErasureQueries, note_user
from .fork import ForkQuery
from .ingress_order import IngressReader
from .input_lookups import InputLookups
from .quota_keeper import Admission, QuotaKeeper
from .quota_sweep import QuotaSweep
from .rebuild import rebuild_session
from .watchdog import Watchdog, note_status

log = logging.getLogger("loopwire.router")

MAX_COMMIT_ATTEMPTS = 20


class RouterService:
    name = "router"

    def __init__(self, ctx: ServiceContext[RouterSettings]) -> None:
        self.ctx = ctx
        self.core = CoreConfig.from_settings(ctx.settings)
        self._locks = KeyedLock()
        self._states = LruCache[str, tuple[int, SessionState]](10_000)
        """The state this replica committed last for a session, with its version: the next
        input of the session takes it out instead of reading and parsing it again (the core
        leaves the state it is given as it was), and its commit puts the new one back. A
        stale one (another replica moved on) is harmless: its commit fails the version
        check and the shell reloads. Only sessions that are not idle are kept: an idle
        one's next input is a new start, seconds or days later, and a state object holds
        ~27 KB (a run twenty tool-turns in), which a router that served thousands of
        sessions would keep for nothing (`_keep`)."""
        self.quotas = QuotaKeeper.of(ctx)
        """Tenant limits (LOOPWIRE_TENANT_LIMITS; quota_keeper.py); None: none configured."""
        self.lookups = InputLookups(ctx, self.quotas)
        self.publisher = EffectPublisher(ctx, self.quotas)
        self.forks = ForkQuery(ctx, archive=self._archive)
        """`<prefix>.api.session.fork` (fork.py): the router owns session state."""
        self.erasure = ErasureQueries(ctx, abort=self._apply_input, forget=self._states.pop)
        self.dead_letters = DeadLetterInputs(ctx, self._apply_input)
        """`<prefix>.api.session.delete` and `user.erase` (erasure.py)."""
        self._watchdog: Watchdog | None = None
        """Ends runs whose step made no progress for too long (watchdog.py)."""
        self._sweep: QuotaSweep | None = None
        self._ingress_reader: IngressReader | None = None

    async def _archive(self, sid: str) -> list[AnyEvent]:
        """The session's events from the LOOPWIRE_EVENTS stream (a rebuild after Redis lost
        the event log too)."""
        return await read_archive(self.ctx.bus.js, self.ctx.subjects, sid)

    def register(self, broker: NatsBroker) -> None:
        subjects = self.ctx.subjects
        # Ingress holds no chain: its work is published, so a redelivered `start` finds
        # its input id among the recent ones instead of long gone from them.
        handlers = self.ctx.settings.router_max_handlers
        self.ctx.work_subscriber(subjects.ingress_all, "router_ingress", max_workers=handlers,
                                 stream=self.ctx.ingress_stream(), holds=False)(self.on_ingress)
        self.ctx.work_subscriber(subjects.router_result, "router_results", max_workers=handlers)(self.on_result)
        # In this process, a service's step results are calls (shared/runtime/dispatcher.py).
        self.ctx.dispatch.serve(RESULTS, self.accept_result)
        if self.ctx.settings.direct_results:
            # The results of the work this replica sends come back to it first
            # (shared/runtime/direct_results.py): its cached state of the session is current.
            self.ctx.direct_receiver("router", self.on_direct_result)
        # Work given up anywhere (shared/runtime/dead_letters.py): its handler never gives up in
        # turn (an outage waits as long as it lasts) and reports nothing itself.
        dead = stream_name(self.ctx.settings.subject_prefix, DEAD_LETTER_STREAM)
        for subject, durable in ((subjects.dead_letter, "router_dead_letters"),
                                 (f"{MAX_DELIVERIES_ADVISORY}.>", "router_max_deliveries")):
            self.ctx.work_subscriber(subject, durable, stream=dead, holds=False, max_deliver=-1,
                                     reports=False)(self.dead_letters.on_dead_letter)
        self.forks.register(broker)
        self.erasure.register(broker)

    async def start(self) -> None:
        self._watchdog = Watchdog(self.ctx.redis, self._apply_input, self._load,
                                  stall_after_s=stall_after(self.ctx.settings),
                                  executor_stall_after_s=executor_stall_after(self.ctx.settings))
        self._watchdog.start()
        if self.quotas is not None:
            self._sweep = QuotaSweep(self.quotas, self.ctx.sessions, self._admit_all, interval_s=self.ctx.settings.tenant_sweep_s)
            self._sweep.start()

    async def stop(self) -> None:
        if self._watchdog is not None:
            await self._watchdog.stop()
        if self._sweep is not None:
            await self._sweep.stop()
        await self.erasure.stop()

    # -- handlers ---------------------------------------------------------------------------
    async def on_ingress(self, msg: Delivery) -> None:
        raw = msg.raw_message
        parsed = self.ctx.subjects.parse_ingress(raw.subject)
        if parsed is None or not check_session_id(parsed[0], self.ctx.settings.tenants):
            log.warning("ingress on %r dropped: the session id must be 1-128 characters of "
                        "[A-Za-z0-9_-]%s", raw.subject,
                        ", after a tenant token (LOOPWIRE_TENANTS)" if self.ctx.settings.tenants else "")
            return  # acked: no delivery can fix it, and there is no session to tell
        sid, verb = parsed
        seq = raw.metadata.sequence.stream
        inp = self._decode_ingress(sid, verb, seq, data=msg.body, headers=raw.headers)
        await self._apply_input(sid, inp)

    def _decode_ingress(self, sid: str, verb: str, seq: int, *, data: bytes, headers: dict[str, str] | None,
                        backlog: bool = False) -> BaseInput:
        inp = decode_ingress(verb, data, input_id=f"in:{seq}", new_id=uuid.uuid4().hex[:16],
                             max_bytes=self.ctx.settings.max_body_bytes,
                             max_depth=self.ctx.settings.max_body_depth)
        inp.ingress_seq = seq
        inp.backlog = backlog
        if isinstance(inp, RejectedInput):
            if not backlog:
                log.warning("session %s: %s rejected: %s", sid, verb, inp.message)
        elif isinstance(inp, StartInput):
            # A tool that forwards its call's headers names its parent (subagent.py).
            parent = subagent.parent_of(inp.body.metadata, headers)
            inp.parent_session_id = parent if parent != sid else None
        return inp

    async def on_result(self, msg: Delivery) -> None:
        try:
            result = STEP_RESULT_ADAPTER.validate_python(orjson.loads(msg.body))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise Undeliverable(f"a malformed step result: {exc}") from None
        await self._apply_input(result.session_id, _result_input(result, msg.redelivered))

    async def on_direct_result(self, body: bytes, headers: dict[str, str]) -> None:
        """A step result sent to this replica (shared/runtime/direct_results.py): applied as
        from the router.result consumer; raises when it is not, and its sender publishes it."""
        result = STEP_RESULT_ADAPTER.validate_python(orjson.loads(body))
        await self._apply_input(result.session_id, _result_input(result, bool(headers.get(RECOVER_HEADER))))

    async def accept_result(self, result: HandedResult, recover: bool = False) -> None:
        """A step result handed over in-process by a service running beside the router
        (shared/runtime/dispatcher.py): applied as if it had come from the router.result
        consumer. `recover`: it comes from a redelivered chain root (shared/runtime/chain.py).
        Raises when it could not be applied; the caller then publishes it."""
        await self._apply_input(result.session_id, _result_input(result, recover))

    # -- the shell --------------------------------------------------------------------------
    async def _apply_input(self, sid: str, inp: BaseInput) -> None:
        """Applied, or raises; the handler runner settles the message (shared/runtime/chain.py)."""
        await self._look_up(sid, inp)
        await self.apply(sid, inp)

    async def _look_up(self, sid: str, inp: BaseInput) -> None:
        # What the pure core may not draw itself: a clock reading and a trace id for a
        # run this input may start; and what it needs from the outside world.
        inp.now_ns = time.time_ns()
        inp.new_trace = new_run_trace()
        await self.lookups.look_up(sid, inp)

    async def apply(self, sid: str, inp: BaseInput) -> Decision:
        async with self._locks.hold(sid):
            if inp.ingress_seq:
                await self._apply_earlier_ingress(sid, inp.ingress_seq, rebuild=not isinstance(inp, RejectedInput))
            return await self._apply_locked(sid, inp)

    async def _admit(self, sid: str, admissions: list[Admission]) -> None:
        """The tenants' answers a commit of session `sid` settled: its own waiting run's is
        applied now (the caller holds its lock), the others' are sent."""
        for admission in admissions:
            if admission.sid == sid:
                await self._look_up(sid, admitted := admission.as_input())
                await self._apply_locked(sid, admitted)
        await self._admit_all([a for a in admissions if a.sid != sid])

    async def _admit_all(self, admissions: list[Admission]) -> None:
        """Other sessions' waiting runs' answers, as work messages to the routers (durable); one
        not sent is left to the sweep (quota_sweep.py), which finds it granted, not started."""
        for admission in admissions:
            try:
                await self.ctx.dispatch.send(admission.as_envelope(), msg_id=admission.as_input().input_id)
            except Exception as exc:
                log.warning("session %s: the answer for run %s was not sent (%s); the tenant sweep sends it",
                            admission.sid, admission.run_id, exc)

    async def _apply_earlier_ingress(self, sid: str, seq: int, rebuild: bool) -> None:
        """Apply the session's ingress messages that precede `seq` in the stream and are not
        applied yet, in stream order (ingress_order.py). Called holding the session's lock."""
        after = await self._ingress_position(sid, seq, rebuild)
        while (earlier := await self.ingress_reader.next_after(sid, after)) is not None and earlier.seq < seq:
            parsed = self.ctx.subjects.parse_ingress(earlier.subject)
            if parsed is not None:
                inp = self._decode_ingress(sid, parsed[1], earlier.seq, data=earlier.data, headers=earlier.headers,
                                           backlog=True)
                await self._look_up(sid, inp)
                await self._apply_locked(sid, inp)
                metrics.INGRESS_IN_BACKLOG.inc()
            after = earlier.seq

    async def _ingress_position(self, sid: str, seq: int, rebuild: bool = True) -> int:
        """The stream sequence from which the session's unapplied ingress before `seq` is
        read: its state's (this replica's latest, else the stored one); for a session
        rebuilt from its transcript, `seq` itself; for a session that has none, the ingress
        consumer's ack floor."""
        cached = self._states.get(sid)
        if cached is None:
            raw, version = await self._load(sid, rebuild)
            cached = (version, SessionState.load(raw, sid))
            if (raw is not None or rebuild) and not is_deleted(raw):
                # (an unrebuilt empty state must not be committed on, nor a tombstone)
                self._states.put(sid, cached)  # what the input's own commit starts from
        state = cached[1]
        if not state.ingress_seq and state.rebuilt:
            # The ack floor could be older than the inputs the transcript holds (read up to a
            # second ago, held back by other sessions' unacked messages): from it, a start
            # applied long ago would start a run again.
            return seq - 1
        return state.ingress_seq or await self.ingress_reader.ack_floor()

    @property
    def ingress_reader(self) -> IngressReader:
        if self._ingress_reader is None:
            self._ingress_reader = IngressReader(
                self.ctx.bus.js, stream=self.ctx.ingress_stream(), consumer=self.ctx.durable_name("router_ingress"),
                ingress_prefix=self.ctx.subjects.ingress_all.removesuffix(".>"))
        return self._ingress_reader

    def _keep(self, sid: str, version: int, state: SessionState) -> None:
        """The committed state for the session's next input, while a run goes on."""
        if state.status == "idle":
            self._states.pop(sid)
        else:
            self._states.put(sid, (version, state))

    async def _apply_locked(self, sid: str, inp: BaseInput) -> Decision:
        use_cache = not inp.recover  # a recovery replays the stored outbox, not a cached one
        for _ in range(MAX_COMMIT_ATTEMPTS):
            cached = self._states.pop(sid) if use_cache else None
            if cached is not None:
                version, state = cached
            else:
                # A refused input changes no state: it needs no rebuild of a lost one,
                # which would cost a read of the events stream per bad body.
                raw, version = await self._load(sid, rebuild=not isinstance(inp, RejectedInput))
                if is_deleted(raw):
                    # Being deleted (erasure.py): no input applies to it any more.
                    log.info("session %s: %s dropped: the session is being deleted", sid, type(inp).__name__)
                    return Decision(state=None)
                state = SessionState.load(raw, sid)
            before = state  # the core changes nothing in it: the counters read it afterwards
            decision = decide(state, inp, self.core)
            if cached is not None and decision.state is None:
                # A no-op on a possibly stale copy (a result "not awaited" may be awaited
                # in the state another replica wrote), or a replay of what may not be the
                # latest outbox: decide again on the stored state.
                use_cache = False
                continue
            stored: list[tuple[AnyEvent, bool]] = []
            if decision.state is not None:
                dumped = decision.state.dump_json()
                committed, stored = await self._commit(sid, version, dumped, decision=decision)
                if not committed:
                    # Another replica advanced the session: decide again on its state.
                    use_cache = False
                    continue
                self._keep(sid, version + 1, decision.state)
                if (decision.state.status == "running") != (before.status == "running"):
                    await note_status(self.ctx.redis, sid, decision.state.status == "running")
            elif decision.replay:
                self._keep(sid, version, state)  # a replay leaves the state as it was
                # The commit it replays may have died before its note: made again.
                await note_status(self.ctx.redis, sid, state.status == "running")
            admissions: list[Admission] = []
            if decision.state is None and not decision.replay and (inp.backlog or isinstance(inp, ToolsInput)):
                # A refusal read from the stream, or the events of a tool step's result the
                # run moved past: those of its calls that were reported before are not
                # published again (call_reports.py).
                await self.publisher.new_events_only(sid, decision.effects)
            else:
                admissions = await self.publisher.perform(sid, decision.effects, stored=stored,
                                                          new_events=decision.outbox_of_later_input)
            if isinstance(inp, StartInput) and inp.body.user_id and (decision.state is not None or decision.replay):
                await note_user(self.ctx, sid, inp.body.user_id)
            count_decision(decision, before.profile)
            count_approvals(before, decision)
            if not decision.replay:
                record_ended_runs(before, decision)
            if admissions:  # only with tenant limits
                await self._admit(sid, admissions)
            return decision
        raise CommitContention(f"session {sid}: gave up after {MAX_COMMIT_ATTEMPTS} conflicting commits")

    async def _commit(self, sid: str, version: int, dumped: bytes, *,
                      decision: Decision) -> tuple[bool, list[tuple[AnyEvent, bool]]]:
        """Commit the new state and history; with Redis, the transition's leading events
        (those before its first other effect) are stored by the same script, so they get
        their seqs in the same round trip. Returns (committed, those events stored)."""
        sessions = self.ctx.sessions
        lead = leading_events(decision.effects)
        if lead and sessions.supports(Capability.COMMIT_WITH_EVENTS) \
                and self.ctx.events.supports(Capability.COMMIT_WITH_EVENTS):
            stored = await sessions.commit_with_events(sid, version, dumped, history_len_before=decision.history_len_before,
                                                       append=decision.append, events=event_items(sid, lead))
            return stored is not None, stored or []
        committed = await sessions.commit(sid, version, dumped, history_len_before=decision.history_len_before, append=decision.append)
        return committed, []

    async def _load(self, sid: str, rebuild: bool = True) -> tuple[dict[str, Any] | None, int]:
        raw, version = await self.ctx.sessions.load(sid)
        if raw is None and rebuild and await rebuild_session(sid, self.ctx.events, self.ctx.sessions,
                                                 default_max_tokens=self.ctx.settings.default_max_tokens,
                                                 archive=self._archive,
                                                 prices=self.core.prices):
            # The state was lost (expired, flushed) but the transcript holds the
            # conversation: continue it instead of starting over.
            raw, version = await self.ctx.sessions.load(sid)
        elif raw is None and rebuild and self.ctx.events.supports(Capability.SEQ_FLOOR):
            # New, or lost with its transcript: its seqs continue after any it had
            # published (shared/stores/seq_floor.py).
            floor = await last_published_seq(self.ctx.bus.js, self.ctx.subjects, sid)
            if floor:
                log.warning("session %s has no state but published events up to seq %d; continuing after it",
                            sid, floor)
                await self.ctx.events.raise_seq(sid, floor)
        return raw, version


def _result_input(result: HandedResult | TenantAdmission, recover: bool = False) -> BaseInput:
    if isinstance(result, TenantAdmission):
        return Admission(result.session_id, result.run_id, result.verdict, position=result.position).as_input()
    if isinstance(result, ExecutorPermission):
        return PermissionInput(input_id=f"permission:{result.checkpoint_id}:{result.attempt}", request=result)
    if isinstance(result, GenerationResult):
        return GenerationInput(input_id=result.step_id, result=result, recover=recover)
    if isinstance(result, ToolCallFinished):
        return CallFinishedInput(input_id=message_ids.call_finished_msg_id(result.step_id, result.result.tool_use_id),
                                 report=result, recover=recover)
    return ToolsInput(input_id=result.step_id, result=result, recover=recover)
