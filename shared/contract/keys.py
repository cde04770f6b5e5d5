"""Every Redis key loopwire writes, and every message id and dedup key derived from a step.

One owner per name: no other module spells `lw:` or a step's suffix (tests/unit checks it).

Keys of one session carry the hash tag `{<sid>}`, so on a Redis Cluster they all live in
the session's hash slot and every Lua script and MULTI touches one slot: its state and
history, its event log, its memory, its executor record, and the records and claims of its
steps (a step belongs to the session its envelope names). Session ids are one or two
tokens of `[A-Za-z0-9_-]` (shared/contract/subjects.py), so a tag never holds a brace.

Keys that span sessions (the sessions index, the running set, breaker state, the tool
catalog, strategy configs, blobs, the token cache, strategy actors' memory) carry no
session tag; what each costs on a cluster is in docs/architecture.md ("Redis keys"). A
tenant's keys (its slots, queue and daily usage) carry the tag `{t:<tenant>}`: one slot
per tenant, and never a script that touches a session's keys too.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "ACTOR_MEMORY_PATTERN",
    "AUDIT_SECRET",
    "DELETE_AUDIT",
    "PREFIX",
    "RUNNING",
    "SESSIONS_INDEX",
    "STRATEGIES",
    "TENANTS",
    "TENANTS_SWEEP",
    "TOOL_CATALOG",
    "TOOL_CATALOG_OWNERS",
    "ToolBatchIds",
    "USER_TENANTS",
    "actor_memory",
    "admission_id",
    "blob",
    "breaker",
    "call_finished_msg_id",
    "compaction_key",
    "dead_letter_msg_id",
    "direct_step_id",
    "event_dedup",
    "event_key",
    "event_msg_id",
    "event_seq",
    "event_stream",
    "executor_delivery",
    "executor_session",
    "fallback_key",
    "generate_msg_id",
    "generation_step",
    "generation_step_id",
    "generation_step_ids",
    "memory",
    "memory_lock",
    "memory_step_id",
    "memory_step_usage",
    "model_limit",
    "model_wait",
    "next_run_id",
    "permission_ask_msg_id",
    "result_msg_id",
    "retract_key",
    "session_forks",
    "session_history",
    "session_key_pattern",
    "session_state",
    "session_tag",
    "session_users",
    "sessions_index",
    "step_claim",
    "step_event_key",
    "step_fence",
    "step_record",
    "tenant_arrivals",
    "tenant_day",
    "tenant_queue",
    "tenant_run_counted",
    "tenant_slots",
    "tenant_waiting",
    "throttle_key",
    "token_count",
    "tool_batch_ids",
    "tool_batch_step",
    "tool_call_key",
    "tool_call_step",
    "tool_result_key",
    "tools_step_id",
    "user_sessions",
]

PREFIX = "lw"


def session_tag(sid: str) -> str:
    """`{<sid>}`: the hash tag that puts a key in its session's slot."""
    return "{" + sid + "}"


# -- one session: all in its slot ---------------------------------------------------------------

def session_state(sid: str) -> str:
    """Hash {ver, state}: the router's state of the session, behind a version."""
    return f"{PREFIX}:s:{session_tag(sid)}"


def session_history(sid: str) -> str:
    """List of the session's messages (JSON), oldest first."""
    return f"{PREFIX}:h:{session_tag(sid)}"


def event_seq(sid: str) -> str:
    """Counter: the session's last event `seq`."""
    return f"{PREFIX}:seq:{session_tag(sid)}"


def event_dedup(sid: str) -> str:
    """Hash: event dedup key -> the seq it was given."""
    return f"{PREFIX}:ek:{session_tag(sid)}"


def event_stream(sid: str) -> str:
    """Stream of the session's stored events, entry id `<seq>-0`."""
    return f"{PREFIX}:e:{session_tag(sid)}"


def memory(sid: str, what: str) -> str:
    """The memory service's `what` of a session: compaction, obs, refl, meta, usage."""
    return f"{PREFIX}:mem:{session_tag(sid)}:{what}"


def memory_lock(sid: str, what: str) -> str:
    """String + TTL: one replica writes the session's `what` (an observation) at a time."""
    return memory(sid, f"lock:{what}")


def memory_step_usage(sid: str, step_id: str) -> str:
    """Hash + TTL: the usage generation step `step_id` claimed (its `extra_usage`)."""
    return f"{PREFIX}:mem:xu:{session_tag(sid)}:{step_id}"


def session_forks(sid: str) -> str:
    """Sorted set: the sessions forked from this one, scored by the order they were listed."""
    return f"{PREFIX}:forks:{session_tag(sid)}"


def executor_session(sid: str) -> str:
    """String (JSON): the external agent's session of a loopwire session."""
    return f"{PREFIX}:exec:{session_tag(sid)}"


def session_users(sid: str) -> str:
    """Set: the `user_id`s the session's runs carried (StartRun), so a delete finds the
    user indexes that list it."""
    return f"{PREFIX}:users:{session_tag(sid)}"


def session_key_pattern(sid: str) -> str:
    """SCAN pattern of every key in the session's slot that names it: its hash tag, where
    any key of the session carries it. Session ids hold no glob character."""
    return "*" + session_tag(sid) + "*"


# -- step records and claims (StepStore names, in their session's slot) --------------------------

def generation_step(sid: str, step_id: str) -> str:
    """StepStore name of a recorded generation (and of its claim)."""
    return f"gen:{session_tag(sid)}:{step_id}"


def tool_call_step(sid: str, tool_use_id: str) -> str:
    """StepStore name of one tool call's recorded result."""
    return f"tool:{session_tag(sid)}:{tool_use_id}"


def tool_batch_step(sid: str, step_id: str) -> str:
    """StepStore name of the claim of one ExecuteTools step (its batch of calls)."""
    return f"tools:{session_tag(sid)}:{step_id}"


def step_record(name: str) -> str:
    """String + TTL: a step's recorded result."""
    return f"{PREFIX}:step:{name}"


def step_claim(name: str) -> str:
    """String + TTL: `<owner>|<fencing token>` of the worker performing a step."""
    return f"{PREFIX}:claim:{name}"


def step_fence(name: str) -> str:
    """Counter: a step's fencing tokens."""
    return f"{PREFIX}:fence:{name}"


# -- across sessions ----------------------------------------------------------------------------

SESSIONS_INDEX = f"{PREFIX}:sessions"
"""Sorted set of session ids by update time (ms), for sessions without a tenant."""


def sessions_index(sid: str) -> str:
    """The sessions index `sid` is listed in: one per tenant (`<tenant>.<sid>`,
    shared/contract/subjects.py), SESSIONS_INDEX without one."""
    tenant, dot, _ = sid.rpartition(".")
    return f"{SESSIONS_INDEX}:{tenant}" if dot else SESSIONS_INDEX


RUNNING = f"{PREFIX}:running"
"""Sorted set: the sessions with a run in progress (the router's watchdog)."""

TOOL_CATALOG = f"{PREFIX}:tools:catalog"
"""Hash: tool name -> the catalog entry the tools service published."""

TOOL_CATALOG_OWNERS = f"{PREFIX}:tools:catalog:owners"
"""Hash: tools process id -> the tool names it serves and when it last said so
(shared/stores/tool_catalog.py)."""

STRATEGIES = f"{PREFIX}:strategies"
"""Hash: strategy configs defined at run time."""


def model_wait(sid: str) -> str:
    """String with a TTL: a generation of the session waits for the model limits (the llm
    service sets it while one waits; `session.get` answers `waiting_for_model`)."""
    return f"{PREFIX}:mw:{session_tag(sid)}"


def model_limit(limit_key: str, what: str) -> str:
    """The fleet-wide budget of one `LOOPWIRE_MODEL_LIMITS` key, all in its own slot:
    `inflight` (leases), `window` (per-second counts), `cooldown`, `waiting`, `waiter_ttl`,
    `tags` (the tenants' fair-queue tags), `vtime`."""
    return f"{PREFIX}:ml:{{ml:{limit_key}}}:{what}"


def breaker(model: str) -> str:
    """Hash: the circuit breaker's state of one model."""
    return f"{PREFIX}:breaker:{model}"


def blob(digest: str) -> str:
    """String: large content by its sha256."""
    return f"{PREFIX}:blob:{digest}"


def token_count(digest: str) -> str:
    """String + TTL: the exact token count of a request, by its hash."""
    return f"{PREFIX}:tok:{digest}"


def actor_memory(actor: str, what: str) -> str:
    """List: a strategy actor's observations or reflections across sessions (capped)."""
    return f"{PREFIX}:mem:actor:{actor}:{what}"


ACTOR_MEMORY_PATTERN = f"{PREFIX}:mem:actor:*"
"""SCAN pattern of every strategy actor's memory list."""


def user_sessions(tenant: str | None, user_id: str) -> str:
    """Set: the sessions of one tenant (`*` without one) whose runs carried `user_id`
    (StartRun), for `user.erase`. The user id is the client's, unverified."""
    return f"{PREFIX}:user:{tenant_tag(tenant or '*')}:{user_id}"


USER_TENANTS = f"{PREFIX}:user:tenants"
"""Set: the tenants (`*`: none) that have a user index, for an operator's `user.erase`."""

DELETE_AUDIT = f"{PREFIX}:audit:deletes"
"""List (capped, newest first): one JSON record per session delete: who asked, when, which
stores and how many records; the session named by a keyed hash of its id, never the id."""

AUDIT_SECRET = f"{PREFIX}:audit:secret"
"""String: the deployment's key of the audit's hash when LOOPWIRE_AUDIT_HMAC_KEY is unset
(random, made by the first delete)."""


# -- one tenant: all in its slot (shared/stores/tenant_quotas.py) ------------------------------

def tenant_tag(tenant: str) -> str:
    """`{t:<tenant>}`: the hash tag that puts a tenant's keys in one slot (`*` for the whole
    deployment without tenants), so each settle or count is one script on it."""
    return "{t:" + tenant + "}"


def _tenant_key(tenant: str, what: str) -> str:
    return f"{PREFIX}:tenant:{tenant_tag(tenant)}:{what}"


def tenant_slots(tenant: str) -> str:
    """Hash: run id -> session id of the tenant's runs that hold a slot."""
    return _tenant_key(tenant, "slots")


def tenant_queue(tenant: str) -> str:
    """Sorted set: the tenant's runs waiting for a slot, by arrival."""
    return _tenant_key(tenant, "queue")


def tenant_waiting(tenant: str) -> str:
    """Hash: run id -> session id of the runs in the tenant's queue."""
    return _tenant_key(tenant, "waiting")


def tenant_arrivals(tenant: str) -> str:
    """Counter: the queue's arrival order."""
    return _tenant_key(tenant, "arrivals")


def tenant_day(tenant: str, day: str) -> str:
    """Hash + TTL {tokens, usd}: the tenant's usage of UTC day `day` (`YYYY-MM-DD`)."""
    return _tenant_key(tenant, f"day:{day}")


def tenant_run_counted(tenant: str, run_id: str) -> str:
    """Hash + TTL {tokens, usd}: how much of run `run_id` the tenant's usage counts already."""
    return _tenant_key(tenant, f"run:{run_id}")


TENANTS = f"{PREFIX}:tenants"
"""Set: the tenants whose keys exist (the sweep walks them); a slot of its own."""

TENANTS_SWEEP = f"{PREFIX}:tenants:sweep"
"""String + TTL: the router that reconciles the tenants' keys this interval."""


# -- step ids, message ids (Nats-Msg-Id) and event dedup keys ------------------------------------

def generation_step_id(run_id: str, gen_seq: int) -> str:
    return f"{run_id}:g{gen_seq}"


def tools_step_id(run_id: str, turn: int) -> str:
    return f"{run_id}:t{turn}"


class StepIds(NamedTuple):
    """The ids a step of a run is published with: its own and its work message's."""

    step_id: str
    msg_id: str
    """The Nats-Msg-Id of the step's work (`memory.assemble`, `tools.execute`)."""


class ToolBatchIds(NamedTuple):
    """The ids a tool batch uses: its step's, its `tools.execute` message's, and the
    `tool.call` event key of each call, in the batch's order."""

    step_id: str
    msg_id: str
    call_keys: list[str]


def generation_step_ids(run_id: str, gen_seq: int) -> StepIds:
    """The next generation's step id and its `memory.assemble` message id."""
    step_id = generation_step_id(run_id, gen_seq)
    return StepIds(step_id, assemble_msg_id(step_id))


def tool_batch_ids(run_id: str, turn: int, call_ids: list[str]) -> ToolBatchIds:
    """The ids of the tool batch of turn `turn`, whose calls are `call_ids`."""
    step_id = tools_step_id(run_id, turn)
    return ToolBatchIds(step_id, execute_msg_id(step_id), [tool_call_key(c) for c in call_ids])


def next_run_id(run_id: str) -> str:
    """The run a follow-up queued at the end of run `run_id` starts."""
    return f"{run_id}.next"


def direct_step_id(tool_use_id: str) -> str:
    """The step of a tool called directly (over the tools service's MCP endpoint), outside a run."""
    return f"direct:{tool_use_id}"


def memory_step_id(owner: str, what: str, *parts: int | str) -> str:
    """A memory-service model call (a summary, an observation, a reflection) of `owner` (a
    step id or a session id): `<owner>:<what>[:<part>...]`, the same on a repeat, so the
    llm service answers it from its record."""
    return ":".join([owner, what, *map(str, parts)])


def result_msg_id(step_id: str) -> str:
    """A step's result to the router: a re-publish after a crash is deduplicated."""
    return f"{step_id}:result"


def call_finished_msg_id(step_id: str, tool_use_id: str) -> str:
    """A finished call of a tool step, reported to the router before the step's result
    (envelopes.ToolCallFinished): its input id too, so a report sent again is applied once."""
    return f"{step_id}:{tool_use_id}:finished"


def assemble_msg_id(step_id: str) -> str:
    return f"{step_id}:assemble"


def generate_msg_id(step_id: str) -> str:
    return f"{step_id}:generate"


def execute_msg_id(step_id: str) -> str:
    return f"{step_id}:execute"


def permission_ask_msg_id(step_id: str, call_id: str, attempt: int) -> str:
    """An external agent's permission question, handed to the router."""
    return f"{step_id}:{call_id}:ask:{attempt}"


def dead_letter_msg_id(*, stream: str, stream_seq: int, subject: str, step_id: str | None, deliveries: int) -> str:
    """A dead letter (shared/runtime/dead_letters.py): one per message given up, by its place
    in its stream, else by its subject, step and delivery count."""
    return f"dead:{stream}:{stream_seq}" if stream_seq else f"dead:{subject}:{step_id}:{deliveries}"


def event_msg_id(sid: str, seq: int) -> str:
    """An event in LOOPWIRE_EVENTS: one message per (session, seq)."""
    return f"{sid}:{seq}"


def event_key(kind: str, *parts: int | str) -> str:
    """Dedup key of a session event: `<kind>:<part>[:<part>...]` (`tool.result:<tool_use_id>`,
    `run.ended:<run_id>`...), the same whenever the same event is emitted again (a
    redelivery, a decision made again), so the session stores it once."""
    return ":".join([kind, *map(str, parts)])


def tool_call_key(tool_use_id: str) -> str:
    """Dedup key of the `tool.call` event of a call, whoever emits it."""
    return event_key("tool.call", tool_use_id)


def tool_result_key(tool_use_id: str) -> str:
    """Dedup key of the `tool.result` event of a call, whoever emits it."""
    return event_key("tool.result", tool_use_id)


def step_event_key(step_id: str, what: str, *parts: int | str) -> str:
    """Dedup key of an event a step emits: `<step_id>:<what>[:<part>...]`, the same on
    every delivery of the step, so a redelivery stores it once."""
    return ":".join([step_id, what, *map(str, parts)])


def retract_key(step_id: str, attempt: int | str) -> str:
    """Dedup key of a `retracted` event of step `step_id` (`attempt`: a claim's number,
    `<n>.<discards>` for a fallback's discarded answer, `cancel`)."""
    return step_event_key(step_id, "retract", attempt)


def throttle_key(step_id: str, attempt: int, throttles: int) -> str:
    """Dedup key of the `throttles`-th `model.throttled` event of a step's `attempt`th claim."""
    return step_event_key(step_id, "throttle", f"{attempt}.{throttles}")


def fallback_key(step_id: str, switches: int) -> str:
    """Dedup key of the `model.fallback` event of a step's `switches`-th switch."""
    return step_event_key(step_id, "fallback", switches)


def compaction_key(step_id: str) -> str:
    """Dedup key of a step's `compaction` event, and the step that claims its usage."""
    return step_event_key(step_id, "compaction")


def admission_id(run_id: str, verdict: str) -> str:
    """A tenant's answer for waiting run `run_id`: its input id and Nats-Msg-Id, the same
    from every router that sends it, so the answer is applied once."""
    return f"admit:{run_id}:{verdict}"


def executor_delivery(step_id: str, delivered: int) -> str:
    """An external agent's `delivered`-th delivery of a step, whose events it keys."""
    return f"{step_id}:x{delivered}"
