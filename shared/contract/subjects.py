"""Every NATS subject loopwire uses, in one place.

Public subjects (``<prefix>.in.*``, ``<prefix>.out.*``, ``<prefix>.api.*``) are the wire
contract in docs/protocol.md and may only grow. Work subjects (``<prefix>.work.*``) are
internal: they carry the envelopes of :mod:`loopwire.shared.contract.envelopes` between services.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

INGRESS_VERBS = ("start", "message", "steer", "abort", "decision")

INGRESS_STREAM = "LOOPWIRE_INGRESS"
EVENTS_STREAM = "LOOPWIRE_EVENTS"
WORK_STREAM = "LOOPWIRE_WORK"
DEAD_LETTER_STREAM = "LOOPWIRE_DEADLETTERS"
MAX_DELIVERIES_ADVISORY = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES"
"""`<this>.<stream>.<consumer>`: what nats-server publishes when a message reached its
consumer's max deliveries (the message stays in its stream)."""


def valid_session_id(sid: str, tenants: bool = False) -> bool:
    """One token of [A-Za-z0-9_-]; with tenants (LOOPWIRE_TENANTS) exactly two,
    `<tenant>.<sid>`, so the tenant is a subject token of its own."""
    if not tenants:
        return bool(SESSION_ID_RE.match(sid))
    tenant, dot, own = sid.partition(".")
    return bool(dot) and bool(SESSION_ID_RE.match(tenant)) and bool(SESSION_ID_RE.match(own))


def tenant_of(sid: str) -> str | None:
    """The tenant of a `<tenant>.<sid>` session id; None for a one-token id."""
    tenant, dot, _ = sid.partition(".")
    return tenant if dot else None


@dataclass(frozen=True)
class Subjects:
    """Subject names under one configurable prefix (``LOOPWIRE_SUBJECT_PREFIX``)."""

    prefix: str = "loopwire"
    tenants: bool = False
    """Session ids are `<tenant>.<sid>` (LOOPWIRE_TENANTS): two subject tokens."""

    # -- public: ingress (captured by LOOPWIRE_INGRESS) -------------------------------
    @property
    def ingress_all(self) -> str:
        return f"{self.prefix}.in.>"

    def ingress(self, sid: str, verb: str) -> str:
        return f"{self.prefix}.in.{sid}.{verb}"

    def parse_ingress(self, subject: str) -> tuple[str, str] | None:
        """``loopwire.in.<sid>.<verb>`` -> (sid, verb); None when the shape is wrong."""
        head = f"{self.prefix}.in."
        if not subject.startswith(head):
            return None
        rest = subject[len(head):]
        sid, dot, verb = rest.rpartition(".")
        if not dot or not sid:
            return None
        return sid, verb

    # -- public: egress (captured by LOOPWIRE_EVENTS) ----------------------------------
    @property
    def events_all(self) -> str:
        return f"{self.prefix}.out.>"

    def event(self, sid: str, kind: str) -> str:
        return f"{self.prefix}.out.{sid}.{kind}"

    def session_events(self, sid: str) -> str:
        return f"{self.prefix}.out.{sid}.>"

    # -- public: queries (core request/reply) ------------------------------------------
    @property
    def session_get(self) -> str:
        return f"{self.prefix}.api.session.get"

    @property
    def transcript_get(self) -> str:
        return f"{self.prefix}.api.transcript.get"

    @property
    def sessions_list(self) -> str:
        """Addition to the contract: sessions by update time (the transcripts service)."""
        return f"{self.prefix}.api.sessions.list"

    @property
    def session_fork(self) -> str:
        """Addition to the contract: a new session forked from one at an event (the router)."""
        return f"{self.prefix}.api.session.fork"

    def query(self, name: str, tenant: str | None = None) -> str:
        """A query subject (`session.get`, `transcript.get`, `sessions.list`, `session.fork`), or the
        tenant's own (`<prefix>.api.<tenant>.<name>`) with tenants on."""
        return f"{self.prefix}.api.{tenant}.{name}" if tenant else f"{self.prefix}.api.{name}"

    def tenant_of_query(self, subject: str) -> str | None:
        """The tenant token of `<prefix>.api.<tenant>.<name>` (None for another shape)."""
        head = f"{self.prefix}.api."
        if not subject.startswith(head):
            return None
        tenant, dot, _ = subject[len(head):].partition(".")
        return tenant if dot and SESSION_ID_RE.match(tenant) else None

    @property
    def tools_list(self) -> str:
        """Addition to the contract: what the tools service knows now."""
        return f"{self.prefix}.api.tools.list"

    # -- internal: work between services (captured by LOOPWIRE_WORK) -------------------
    @property
    def work_all(self) -> str:
        return f"{self.prefix}.work.>"

    @property
    def memory_assemble(self) -> str:
        """router -> memory: build the context of one generation."""
        return f"{self.prefix}.work.memory.assemble"

    @property
    def llm_generate(self) -> str:
        """memory -> llm: one model call with an assembled context."""
        return f"{self.prefix}.work.llm.generate"

    @property
    def tools_execute(self) -> str:
        """router -> tools: the tool calls of one assistant message."""
        return f"{self.prefix}.work.tools.execute"

    @property
    def router_result(self) -> str:
        """llm/tools -> router: the outcome of a step."""
        return f"{self.prefix}.work.router.result"

    @property
    def llm_summarize(self) -> str:
        """memory -> llm, core request/reply: internal non-streamed generations (summaries,
        observations), a `Generate` in, a `GenerationResult` back. Deliberately outside
        `<prefix>.work.>`: LOOPWIRE_WORK captures that, and would answer a core request
        with its PubAck."""
        return f"{self.prefix}.rpc.llm.summarize"

    @property
    def llm_limits_wake(self) -> str:
        """llm -> llm, core NATS, every replica: the waiting generations that may ask the
        model limits again (a request in flight ended; services/llm/limiter.py)."""
        return f"{self.prefix}.rpc.llm.limits_wake"

    @property
    def llm_count_tokens(self) -> str:
        """memory -> llm, core request/reply: a `CountTokens` in, a `TokenCount` back (the
        exact count of a request, services/llm/token_count.py). Internal like the rest of
        `<prefix>.rpc.>`."""
        return f"{self.prefix}.rpc.llm.count_tokens"

    @property
    def tools_call(self) -> str:
        """`loopwire mcp` -> tools, core request/reply: one tool call outside any run
        (services/tools/direct_call.py). Internal like the rest of `<prefix>.rpc.>`."""
        return f"{self.prefix}.rpc.tools.call"

    def tools_alive(self, replica: str) -> str:
        """One tools process's liveness, core request/reply (any body; it answers while it
        runs): NATS's no-responders to it says the process is gone, and its catalog entries
        with it (shared/stores/tool_catalog.py). Internal like the rest of `<prefix>.rpc.>`."""
        return f"{self.prefix}.rpc.tools.alive.{replica}"

    @property
    def dead_letter(self) -> str:
        """Work a handler gave up (shared/runtime/redelivery.py), to the router: captured by
        LOOPWIRE_DEADLETTERS with the max-deliveries advisories of the other streams.
        Outside `<prefix>.work.>` (LOOPWIRE_WORK captures that)."""
        return f"{self.prefix}.deadletter"

    # -- internal: cancel notices to in-flight work (core NATS, best effort) -----------
    def cancel(self, sid: str) -> str:
        return f"{self.prefix}.ctl.{sid}.cancel"

    @property
    def cancel_all(self) -> str:
        return f"{self.prefix}.ctl.*.*.cancel" if self.tenants else f"{self.prefix}.ctl.*.cancel"

    def permission(self, sid: str) -> str:
        """router -> llm: the decision on an external agent's permission request
        (services/llm/executors/permissions.py), `{"checkpoint_id", "decision", "note"}`."""
        return f"{self.prefix}.ctl.{sid}.permission"

    @property
    def permission_all(self) -> str:
        return f"{self.prefix}.ctl.*.*.permission" if self.tenants else f"{self.prefix}.ctl.*.permission"

    @property
    def chains(self) -> str:
        """Every `loopwire up` process's count of work chains (core NATS, every
        LOOPWIRE_CHAIN_BALANCE_INTERVAL_S):
        shared/runtime/chain_balance.py."""
        return f"{self.prefix}.ctl.chains"

    def deliver(self, durable: str) -> str:
        """Where the durable push consumer `durable` delivers (its replicas subscribe with
        the deliver group): fixed rather than a random inbox, so replicas that start at
        the same moment create the consumer with the same config, which JetStream accepts
        from each of them (with an inbox of its own, the second one's create is refused,
        "consumer name already in use"). Outside `_INBOX.>`, which clients may read."""
        return f"{self.prefix}.deliver.{durable}"

    def direct(self, service: str, replica: str) -> str:
        """Where one replica of `service` takes step results as core NATS requests, answered
        once applied (shared/runtime/direct_results.py). Captured by no stream."""
        return f"{self.prefix}.direct.{service}.{replica}"


def stream_name(prefix: str, base: str) -> str:
    """Stream names carry the prefix when it is not the default, so two deployments
    with different prefixes can share one NATS account without colliding."""
    if prefix == "loopwire":
        return base
    return f"{base}_{re.sub(r'[^A-Za-z0-9_-]', '_', prefix).upper()}"
