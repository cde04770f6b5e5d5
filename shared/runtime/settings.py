"""Settings from the environment (``LOOPWIRE_*``), one model for every service."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Annotated, Any

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from loopwire.shared.contract.model_limits import ModelLimit, ModelLimits
from loopwire.shared.contract.protocol import Permission
from loopwire.shared.contract.tenant_limits import TenantLimit, TenantLimits


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOOPWIRE_", extra="ignore", use_attribute_docstrings=True)

    nats_url: str = "nats://127.0.0.1:4222"
    """NATS server URL; the servers of one cluster comma-separated
    (`nats://n0:4222,nats://n1:4222,nats://n2:4222`), for the services, the CLI, the UI and
    `loopwire.Client` alike."""
    nats_user: str | None = None
    """NATS user (with LOOPWIRE_NATS_PASSWORD). One way of authenticating at a time: user
    and password, token, creds file or nkey seed (shared/runtime/credentials.py); services and CLI
    alike. Credentials inside the URL work too and are never printed."""
    nats_password: str | None = None
    """NATS password."""
    nats_token: str | None = None
    """NATS authentication token."""
    nats_creds: str | None = None
    """Path to a NATS `.creds` file (user JWT + nkey seed)."""
    nats_creds_file: str | None = None
    """Deprecated alias of LOOPWIRE_NATS_CREDS."""
    nats_nkey_seed: str | None = None
    """Path to a file holding a NATS user nkey seed (`SU...`)."""
    nats_tls_ca: str | None = None
    """CA bundle (PEM) that verifies the NATS server's certificate; setting it (or a
    `tls://` URL) turns TLS on."""
    nats_tls_cert: str | None = None
    """Client certificate (PEM) for NATS mutual TLS (with LOOPWIRE_NATS_TLS_KEY)."""
    nats_tls_key: str | None = None
    """Private key (PEM) of LOOPWIRE_NATS_TLS_CERT."""
    tenants: bool = False
    """Tenants (docs/security.md): every session id is `<tenant>.<sid>`, so its subjects
    carry the tenant as a token of their own (`<prefix>.in.<tenant>.<sid>.<verb>`,
    `<prefix>.out.<tenant>.<sid>.<kind>`) that NATS permissions can match, and queries
    are also answered on `<prefix>.api.<tenant>.<query>` for that tenant's sessions only.
    Off: session ids are one token and carry no tenant."""
    tenant: str | None = None
    """The tenant a client (the CLI, LoopwireClient.from_settings) acts for when tenants
    are on: its queries go to `<prefix>.api.<tenant>.…` and its reply inbox is
    `_INBOX_<tenant>` (deploy/nats/tenants.conf)."""
    redis_url: str = "redis://127.0.0.1:6379/0"
    """Redis for session state, step records, the event log and blobs; `rediss://` for
    TLS. A password in the URL is never printed."""
    redis_password: str | None = None
    """Redis password (AUTH), so the URL need not hold it; wins over one in the URL."""
    redis_tls_ca: str | None = None
    """CA bundle (PEM) that verifies the Redis server's certificate (`rediss://` URLs)."""
    redis_cluster: bool = False
    """LOOPWIRE_REDIS_URL names a node of a Redis Cluster (any one; comma-separate several
    to try in turn): every session's keys share its hash slot, so sessions spread over the
    masters (docs/deployment.md)."""
    redis_sentinels: str | None = None
    """`host:port,...` of Redis Sentinels: the master is the one they name
    (LOOPWIRE_REDIS_SENTINEL_MASTER), and the services follow its failover.
    LOOPWIRE_REDIS_URL then gives the scheme, database and credentials only."""
    redis_sentinel_master: str | None = None
    """The master's name the sentinels monitor (`sentinel monitor <name> ...`)."""
    redis_sentinel_password: str | None = None
    """The sentinels' own password, when they have one (LOOPWIRE_REDIS_PASSWORD is the master's)."""
    redis_wait_replicas: int | None = None
    """Replicas a write that a failover must not lose waits for (Redis `WAIT`): step
    records, session commits, event seqs. Unset: 1 on a cluster or behind sentinels, 0 on
    one server. 0 turns it off: a failover may then lose the last writes (docs/deployment.md)."""
    redis_wait_timeout_ms: int = 500
    """How long such a write waits for its replicas; one that is not acknowledged in time
    goes on (and is logged), and that master's writes stop waiting until a probe finds
    its replicas back."""
    subject_prefix: str = "loopwire"
    """Prefix of every subject (and suffix of the stream names when not `loopwire`)."""
    metrics_port: int = 9464
    """Prometheus /metrics (and /healthz, /readyz) of `loopwire up`; 0 disables."""
    metrics_host: str = "0.0.0.0"
    """Address of the /metrics, /healthz, /readyz server."""
    ui_port: int = 8765
    """Port of the session inspector, `loopwire ui` (a web page: sessions, live timelines,
    approvals, message / steer / abort, waterfalls, fork and replay)."""
    ui_host: str = "127.0.0.1"
    """Address `loopwire ui` listens on. Whoever reaches it can answer approvals, steer runs
    and replay sessions with live tools as the UI's NATS user: open it wider only behind
    your own access control."""
    data_dir: str = ".run"
    """Where `loopwire up --embedded` keeps the data and logs of the nats-server and
    redis-server it starts."""
    workers: int = 1
    """Processes `loopwire up` runs, each with all five services, so one machine's cores
    are all used (`loopwire up --workers N` overrides it); worker i serves /metrics on
    LOOPWIRE_METRICS_PORT + i. On Kubernetes keep 1 and scale with replicas."""

    # -- handlers in flight per replica ---------------------------------------------------
    router_max_handlers: int = Field(default=64, gt=0)
    """Work messages one router replica handles at once (each of its consumers: ingress,
    results): its work is CPU-bound, so more would only queue inside the process."""
    memory_max_handlers: int = Field(default=64, gt=0)
    """Context assemblies one memory replica handles at once (CPU-bound, as the router)."""
    llm_max_handlers: int = Field(default=4096, gt=0)
    """Generations one llm replica holds in flight: each waits on the provider and costs a
    coroutine and its request, so a replica holds thousands (the model client's
    connection pool is sized to it); the provider's limits bound what is sent."""
    tools_max_handlers: int = Field(default=1024, gt=0)
    """Tool batches one tools replica runs at once (I/O-bound: each waits on a provider)."""

    # -- durability ---------------------------------------------------------------------
    ack_wait_s: float = 30.0
    """JetStream AckWait for work consumers; long work sends in_progress() heartbeats."""
    drain_timeout_s: float = 20.0
    """On SIGTERM a replica stops taking work and gives the work it holds this long to
    finish; what is still running then is handed back (a nak with no delay, its claims
    released) for another replica, and the process exits 0. Under Kubernetes' 30 s grace
    period (the Helm chart's terminationGracePeriodSeconds follows it)."""
    max_deliver: int = 20
    """Deliveries before a work message is given up: its run ends `failed` with an `error`
    event `undeliverable` (shared/runtime/dead_letters.py). Redeliveries after an outage-like
    failure are spaced so that these deliveries span LOOPWIRE_OUTAGE_TOLERANCE_S."""
    outage_tolerance_s: float = 300.0
    """An outage of NATS or Redis up to this long delays runs and loses none: failed
    handlers are redelivered with a growing delay that spans it (shared/runtime/redelivery.py);
    a run with a step in flight and no progress for longer than this (or than the longest a
    step may take, LOOPWIRE_LLM_TIMEOUT_S or LOOPWIRE_TOOL_TIMEOUT_S plus an ack wait, when
    that is longer) is ended `failed` (`undeliverable`) and its session takes new input."""
    fault_max_deliver: int = 3
    """Deliveries of a work message whose handler keeps failing with an error that is not
    an outage (a bug, a poison input in the session's history) before it is given up as
    undeliverable, so one bad step never retries for the whole tolerance."""
    dedup_window_s: float = 120.0
    """Duplicate window of the ingress and work streams (Nats-Msg-Id)."""
    stream_replicas: int = 1
    """JetStream replicas of every stream loopwire creates (3 on a three-node cluster); a
    stream created earlier with another number is updated at start-up (start-up stops,
    saying why, when NATS refuses)."""
    jetstream_timeout_s: float = 10.0
    """How long a JetStream request may take: a publish's acknowledgement, a stream read,
    creating a stream or a consumer. A publish or read that a stream's leader must answer
    is sent again every 2 s meanwhile (a cluster electing a leader). nats-py's own default,
    5 s, is short for a cluster placing new replicated streams."""
    jetstream_ready_timeout_s: float = 120.0
    """How long start-up retries creating the streams and consumers while JetStream does
    not answer (a cluster with no meta leader yet, servers still joining) before it stops."""
    local_handover: bool = True
    """When the receiving service runs in the same process (`loopwire up`), a run's hops
    are calls and tasks instead of JetStream messages, held by the run's first work
    message, which stays unacked until they are done, so a crash still redelivers it
    (shared/runtime/chain.py). Between `loopwire serve` processes the hops are JetStream
    messages (a step's result first goes to its router replica: LOOPWIRE_DIRECT_RESULTS)."""
    direct_results: bool = True
    """A step's result goes to the router replica that asked for it, as a core NATS
    request answered once the result is applied, instead of a JetStream message any router
    may take; JetStream when that replica does not answer (gone, stopping) or could not
    apply it (shared/runtime/direct_results.py). The result is recorded before either, and
    the work that produced it stays unacked until it is handed over."""
    direct_result_timeout_s: float = 5.0
    """How long a direct result waits for its replica's answer before it goes to JetStream
    (a replica that died with the request in hand)."""
    chain_max_hops: int = 40
    """Hops handed off under one work message before the next goes to JetStream again
    (and starts a new chain, in whichever replica takes it): spreads long runs over the
    replicas and bounds what one redelivery recovers. 0: no limit."""
    gc_thresholds: str = "100000,20,20"
    """Thresholds of Python's cyclic garbage collector (`gc.set_threshold`), set when the
    services start; empty keeps Python's `700,10,10`. See shared/runtime/gc_tuning.py: with the
    defaults a worker under load spent ~25% of its CPU collecting, ~10% at `20000,20,20`."""
    gc_freeze: bool = True
    """`gc.freeze()` once the services are up: the objects made at start-up are never
    walked by a collection again."""
    gc_idle_check_s: float = 2.0
    """How often a process looks whether a burst of work has ended; at the first quiet
    interval after a busy one it collects its garbage and returns its free heap to the OS
    (shared/runtime/gc_tuning.py, `IdleCollector`), so a pod's memory goes back down after
    the load. 0: never."""
    chain_balance: bool = True
    """`loopwire up` processes tell each other how many work chains they hold (core NATS
    `<prefix>.ctl.chains`); one holding more than its share publishes the next hop of a
    chain instead, so its run moves to another replica."""
    chain_balance_interval_s: float = 0.1
    """How often those processes report their chains, and how often one may shed its
    excess (shared/runtime/chain_balance.py). At 0.5 s, one of `up --workers 2`'s workers
    sat idle 0.2-0.3 s at the end of each of the bench's loads, at 0.1 s about 0.1 s."""
    step_result_ttl_s: int = 7 * 24 * 3600
    """How long recorded step results (model answers, tool results) are kept for replay."""
    session_ttl_s: int = 0
    """Expire idle session state after this many seconds; 0 keeps it."""
    audit_hmac_key: str | None = None
    """Key of the HMAC that names a deleted session in its audit record
    (`session.delete`: who asked, when, what was removed, never the session's id); unset:
    a random key the first delete stores in Redis."""
    delete_settle_s: float = 5.0
    """After a `session.delete`, its sweep again this many seconds later: what a step in
    flight when it ran wrote afterwards (0: none)."""
    events_max_age_s: float = 0
    """Max age of LOOPWIRE_EVENTS messages; 0 keeps them."""
    ingress_max_age_s: float = 24 * 3600
    """Max age of LOOPWIRE_INGRESS messages (an audit trail of what users sent; the
    router's durable consumer tracks what it applied); 0 keeps them."""
    work_max_age_s: float = 7 * 24 * 3600
    """Max age of a LOOPWIRE_WORK message: one that outlived every delivery attempt is
    dropped after this; 0 keeps them."""

    # -- limits ---------------------------------------------------------------------------
    large_content_bytes: int = 64 * 1024
    """Tool results larger than this are stored once in Redis (content-addressed) and
    travel as a reference block (shared/stores/blobs.py)."""
    max_body_bytes: int = 256 * 1024
    """Ingress bodies larger than this are rejected with an `error` event."""
    max_body_depth: int = 32
    """Ingress bodies (and queries) nested deeper than this many levels of objects and
    arrays are rejected with an `error` event (`body_too_deep`)."""
    default_model: str = "claude-sonnet-4-5"
    """Model of a run whose StartRun names none."""
    default_max_tokens: int = 4096
    """max_tokens of a run whose StartRun names none."""
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    """JSON object of model prices in USD per million tokens, added to (or overriding) the
    built-in table (shared/runtime/pricing.py): `{"my-model": {"input": 1.0, "output": 5.0,
    "cache_read": 0.1, "cache_write": 1.25}}`; a model id uses its longest known prefix. A
    start with `limits.max_cost_usd` whose models are not all priced is refused
    (`unpriced_model`)."""

    # -- llm ------------------------------------------------------------------------------
    llm_provider: str = "auto"
    """`anthropic`, `scripted`, or `auto` (anthropic when ANTHROPIC_API_KEY or
    ANTHROPIC_BASE_URL is set, otherwise the scripted offline model)."""
    llm_timeout_s: float = 600.0
    """Timeout of one model request."""
    llm_max_retries: int = 2
    """Retries of a retryable error on one model before the next fallback is tried."""
    llm_retry_base_delay_s: float = 0.5
    """First backoff delay between retries; doubles each retry, with jitter."""
    llm_retry_max_delay_s: float = 8.0
    """Cap of one backoff delay (also of a server's retry-after)."""
    llm_breaker_failures: int = 5
    """Consecutive retryable failures of one model (across all replicas) that open its
    circuit breaker; 0 disables the breaker."""
    llm_breaker_cooldown_s: float = 30.0
    """How long an open breaker skips its model before one probe call is let through."""
    llm_breaker_probe_ttl_s: float = 120.0
    """How long one replica's claim on the half-open probe lasts if it never reports back."""
    model_limits: Annotated[dict[str, ModelLimit], NoDecode] = Field(default_factory=dict)
    """JSON object `{"<model id>" or "<prefix>*": {"rpm": int, "input_tpm": int,
    "output_tpm": int, "max_concurrent": int}}` (any may be omitted): what the whole
    deployment sends to a model, held in Redis for every llm replica; a generation over a
    limit waits (`model.throttled`), a 429/529's `retry-after` pauses every replica
    (docs/services/llm.md, "Model limits"). Unset: nothing is held back."""
    model_wait_max_s: float = Field(default=600.0, gt=0)
    """Longest a generation waits for the model limits; past it, it is handled as the
    provider's rate limit (the next fallback, then the error policy)."""

    # -- external executors (profiles claude_code, opencode, codex, acp; docs/executors.md) --
    claude_code_cmd: str = "claude"
    """Command line of Claude Code, the agent of profile `claude_code`."""
    opencode_cmd: str = "opencode"
    """Command line of opencode, the agent of profile `opencode`."""
    codex_cmd: str = "codex"
    """Command line of Codex, the agent of profile `codex`."""
    acp_agents: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """JSON object `{"<name>": "<command line>"}`: the ACP agents a run of profile `acp` may
    name (StartRun `"executor": {"agent": "<name>"}`); any other name is refused."""
    executor_dir: str | None = None
    """Where an executor run without a workspace gets its session's own directory
    (`<dir>/sessions/<sid>`) and the agents keep their state (`<dir>/agents/<agent>`: put
    it on a volume every llm replica mounts, and a step redelivered to another replica
    resumes the agent's session there). Unset: `loopwire-executor` in the temp directory."""
    executor_timeout_s: float = 3600.0
    """Longest one agent turn may take (its process is stopped then, the step fails)."""

    # -- loop control (router) --------------------------------------------------------------
    max_inner_iterations: int = 0
    """Generations allowed in one outer iteration of a run; 0: the profile's default."""
    max_outer_iterations: int = 0
    """Outer iterations (follow-ups taken at the boundary) per run; 0: the profile's default."""
    budget_warning_pct: float = 0.8
    """A `budget.warning` event is emitted when a run has used this share of a limit."""
    loop_repeat_threshold: int = 3
    """The same tool call (name and input) in this many consecutive turns is a loop."""
    loop_text_repeats: int = 2
    """The same (normalised) text answer in this many consecutive turns is a loop."""
    vacuous_max_retries: int = 2
    """Retries of an empty or meaningless answer before it is passed through as it is."""
    commitment_max_nudges: int = 2
    """Nudges per run for a reply that announces an action and does not take it."""
    context_retries: int = 1
    """Retries with a reduced context after a `context_too_long` error."""

    # -- profiles (router, docs/profiles.md) ------------------------------------------------
    strategy_file: str | None = None
    """JSON or YAML file of strategy configs keyed by (actor, expectation); Redis hash
    of strategies (docs/profiles.md) adds configs at run time (the file wins for a pair it
    defines)."""
    max_subagent_depth: int = 3
    """A child run (metadata.parent_session_id) deeper than this is refused with an error."""

    # -- operator policy (what a client may only narrow) ------------------------------------
    workspace_roots: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Directories (separated by `:`) inside which a run may name a workspace
    (`metadata.workspace`, relative to a root or absolute inside one, symlinks resolved);
    anything else is refused with `error` `workspace_not_allowed`. Unset: no run may name
    a workspace."""
    tool_policy: Annotated[dict[str, Permission], NoDecode] = Field(default_factory=dict)
    """JSON object `{tool name: "auto" or "approve" or "deny"}`: a run's (and a strategy
    config's) `tool_permissions` may make a tool stricter than this, never looser."""
    tenant_limits: Annotated[dict[str, TenantLimit], NoDecode] = Field(default_factory=dict)
    """JSON object `{"<tenant>" or "*": {"max_running": int, "max_queued": int,
    "tokens_per_day": int, "usd_per_day": number}}` (any limit may be omitted; `*` for
    tenants not named, and for the whole deployment without LOOPWIRE_TENANTS): runs beyond
    `max_running` wait in their tenant's queue, starts beyond `max_queued` or with the UTC
    day's allowance spent are refused (`quota_exceeded`), a run that crosses the allowance
    converges (docs/security.md, "Tenant limits"). Unset: nothing is limited or counted."""
    tenant_metrics_labels: int = 20
    """Distinct `tenant` label values one process gives the loopwire_tenant_* metrics
    (tenants named in LOOPWIRE_TENANT_LIMITS first); the others are counted as `other`."""
    tenant_sweep_s: float = 10.0
    """How often a router reconciles the tenants' slots and queues with their sessions
    (a slot whose run ended while its router crashed is released, a run granted a slot
    that nobody started is started) and refreshes the loopwire_tenant_* gauges."""
    tool_providers: Annotated[dict[str, str], NoDecode] = Field(default_factory=dict)
    """JSON object `{tool name: service name}`: which provider serves a tool that several
    providers (different NATS service names) offer. Without a pin such a tool is a
    conflict: refused and reported, never served by either."""

    # -- tools ----------------------------------------------------------------------------
    tool_modules: Annotated[list[str], NoDecode] = Field(default_factory=list)
    """Python modules to import for in-process tools (comma separated or JSON list)."""
    tool_timeout_s: float = 120.0
    """Per-call timeout; a call that takes longer gets an error result."""
    tool_attempt_timeout_s: float = 30.0
    """A provider request unanswered this long whose provider instance is gone (discovery
    forgot it) is sent again with the same Loopwire-Tool-Use-Id, within the call's timeout;
    so is one whose reply a NATS reconnect may have lost. A busy provider is waited for."""
    discovery_interval_s: float = 2.0
    """How often tool providers are discovered with $SRV.INFO."""
    discovery_misses: int = 3
    """A provider that misses this many discovery rounds in a row is forgotten."""
    mcp_servers: Annotated[dict[str, dict[str, Any]], NoDecode] = Field(default_factory=dict, repr=False)
    """MCP servers whose tools the tools service offers (docs/tools.md), a JSON object
    `{"<server>": {"command": "...", "args": [...], "env": {...}}}` (stdio) or
    `{"<server>": {"url": "http://.../mcp", "headers": {...}}}` (streamable HTTP); optional
    per server: `timeout_s`, `retries`. Tool `t` of server `s` is the loopwire tool `s__t`."""

    # -- memory (context assembly, docs/memory.md) ------------------------------------------
    context_window_cap: int = 0
    """When > 0, the memory service never assumes a context window larger than this
    (a deployment whose models have smaller windows; tests); 0: the run's own window."""
    memory_pressure_pct: float = Field(default=0.7, ge=0, le=1)
    """Above this share of the window the system prompt gets an ephemeral note asking
    for concise answers; 0: no note."""
    memory_compaction_target_pct: float = 0.6
    """A compaction aims at this share of the compaction threshold, so the next one is
    some turns away."""
    memory_reduce_context_pct: float = 0.5
    """After a `context_too_long` error (AssembleContext.reduce_context) the context is
    compacted to this share of the window."""
    memory_keep_recent_turns: int = 2
    """The latest turns (assistant message and what follows it) are never summarised."""
    memory_summary_max_tokens: int = 1024
    """Upper bound of one summary (also capped at 15% of the window)."""
    memory_summary_timeout_s: float = 120.0
    """How long the memory service waits for a summary from the llm service before it
    falls back to dropping the oldest messages from the request."""
    memory_token_counting: str = "auto"
    """`api` (Anthropic's count_tokens), `estimate`, or `auto` (api when the llm service
    talks to Anthropic, i.e. ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is set)."""
    memory_chars_per_token: float = 3.5
    """The estimate's starting ratio; it calibrates itself against count_tokens."""
    memory_token_cache_size: int = 4096
    """Token counts kept in process (LRU, by content hash)."""
    memory_token_cache_ttl_s: int = 24 * 3600
    """Token counts kept in Redis (by content hash); 0 disables the Redis cache."""
    memory_history_memo_bytes: int = 16 * 1024 * 1024
    """Memory (about) for the history messages kept decoded in process, by their stored
    bytes, with their normalised forms and tallies (least recently read out first): a
    generation then decodes only the history's new messages. 0 decodes every message
    every time."""
    lightweight_model: str | None = None
    """The lightweight model of a run with `model.selection: auto` whose StartRun names no
    `model.lightweight`; with neither, `auto` has no lightweight model and the run gets a
    `warning` (`no_lightweight_model`) once."""
    memory_model: str | None = None
    """Model of the memory's own calls (compaction summaries, observations, reflections)
    for a run whose StartRun names none (`model.memory`, or `model.lightweight` with
    `model.selection: auto`); unset: the run's own models.
    Their tokens count in the run's usage and cost at this model's price."""
    memory_observe_every_turns: int = 10
    """An observation is written after this many model turns; 0 disables observations."""
    memory_reflect_every_observations: int = 5
    """A reflection is written after this many observations; 0 disables reflections."""
    memory_observations_in_context: int = 5
    """Latest observations hydrated into the system prompt."""
    memory_reflections_in_context: int = 3
    """Latest reflections hydrated into the system prompt."""

    # -- logging and tracing ----------------------------------------------------------------
    otel_capture_content: bool = False
    """Record message contents (prompts, completions, tool arguments and results) on the
    trace spans, redacted; off by default. Trace export itself is asked for with the
    standard `OTEL_EXPORTER_OTLP_ENDPOINT` (docs/observability.md)."""
    log_level: str = "INFO"
    """Log level of the services."""
    log_json: bool = False
    """JSON log lines (with session, run and trace ids) instead of text."""


    @field_validator("gc_thresholds")
    @classmethod
    def _gc_thresholds(cls, value: str) -> str:
        from loopwire.shared.runtime.gc_tuning import parse_thresholds

        parse_thresholds(value)  # a clear error at start-up, not at the first collection
        return value

    @field_validator("memory_token_counting")
    @classmethod
    def _token_counting(cls, value: str) -> str:
        mode = value.strip().lower()
        if mode not in ("auto", "api", "estimate"):
            raise ValueError(f"LOOPWIRE_MEMORY_TOKEN_COUNTING must be auto, api or estimate, not {mode!r}")
        return mode

    @field_validator("workspace_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [part for part in value.split(":") if part.strip()]
        return value

    @field_validator("tool_policy", "tool_providers", "acp_agents", "tenant_limits", "model_limits", mode="before")
    @classmethod
    def _json_object(cls, value: object) -> object:
        if isinstance(value, str):
            return json.loads(value) if value.strip() else {}
        return value

    @field_validator("tenant_limits")
    @classmethod
    def _tenant_names(cls, value: dict[str, TenantLimit]) -> dict[str, TenantLimit]:
        TenantLimits.parse(value, tenants=True)  # a bad tenant name stops the start-up
        return value

    @field_validator("model_limits")
    @classmethod
    def _model_limit_keys(cls, value: dict[str, ModelLimit]) -> dict[str, ModelLimit]:
        ModelLimits.parse(value)  # a bad key stops the start-up
        return value

    def model_limits_table(self) -> ModelLimits:
        return ModelLimits.parse(self.model_limits)

    def limits_table(self) -> TenantLimits | None:
        """LOOPWIRE_TENANT_LIMITS as the table the services apply; None when it is unset."""
        return TenantLimits.parse(self.tenant_limits, self.tenants) if self.tenant_limits else None

    @field_validator("mcp_servers", mode="before")
    @classmethod
    def _mcp_servers_json(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if not text:
                return {}
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"LOOPWIRE_MCP_SERVERS is not JSON: {exc}") from None
        return value

    @field_validator("tool_modules", mode="before")
    @classmethod
    def _split_modules(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def settings_table() -> str:
    """The README's configuration table, generated from the fields and their docstrings
    (a test keeps the README in sync)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
        shown = "—" if default in (None, [], {}) else f"`{default}`"
        meaning = " ".join((field.description or "").split()).replace("|", "\\|")
        rows.append(f"| `LOOPWIRE_{name.upper()}` | {shown} | {meaning} |")
    return "\n".join(rows) + "\n"
