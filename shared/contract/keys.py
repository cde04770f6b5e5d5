"""Every Redis key loopwire writes.

One owner per name: no other module spells `lw:` (tests/unit checks it); the ids a step's
messages and events are published with are message_ids.py's.

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

__all__ = ["ACTOR_MEMORY_PATTERN", "AUDIT_SECRET", "DELETE_AUDIT", "PREFIX", "RUNNING", "SESSIONS_INDEX",
           "STRATEGIES", "TENANTS", "TENANTS_SWEEP", "TOOL_CATALOG", "TOOL_CATALOG_OWNERS", "USER_TENANTS",
           "actor_memory", "blob", "breaker", "event_dedup", "event_seq", "event_stream", "executor_session",
           "generation_step", "memory", "memory_lock", "memory_step_usage", "model_limit", "model_wait",
           "session_forks", "session_history", "session_key_pattern", "session_state", "session_tag",
           "session_users", "sessions_index", "step_claim", "step_fence", "step_record", "tenant_arrivals",
           "tenant_day", "tenant_queue", "tenant_run_counted", "tenant_slots", "tenant_waiting", "token_count",
           "tool_batch_step", "tool_call_step", "user_sessions"]

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
