"""The shared runtime's settings from the environment (``LOOPWIRE_*``): what the runtime
itself reads (NATS, Redis, streams, redelivery, observability) and what more than one
service reads. Each service's own knobs are a subclass of `RuntimeSettings` in its own
folder (services/<name>/settings.py), since no service may import another's; the one
`Settings` a process reads composes them all (loopwire/settings.py). Code here is typed
against `RuntimeSettings` alone."""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from loopwire.shared.contract.model_limits import ModelLimit, ModelLimits
from loopwire.shared.contract.protocol import Permission
from loopwire.shared.contract.tenant_limits import TenantLimit, TenantLimits


def json_object(value: object) -> object:
    """A JSON object setting given as text (an empty one: `{}`); what is not text as it is.
    Each settings class's validator that calls it has a name of its own: the composed
    `Settings` inherits every class's validators by name, so a second `_json_object`
    would replace the first."""
    if isinstance(value, str):
        return json.loads(value) if value.strip() else {}
    return value


class RuntimeSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOOPWIRE_", extra="ignore", use_attribute_docstrings=True)

    # -- connections ------------------------------------------------------------------------
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

    # -- durability ---------------------------------------------------------------------
    ack_wait_s: float = 30.0
    """JetStream AckWait for work consumers; long work sends in_progress() heartbeats."""
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
    step_result_ttl_s: int = 7 * 24 * 3600
    """How long recorded step results (model answers, tool results) are kept for replay."""
    session_ttl_s: int = 0
    """Expire idle session state after this many seconds; 0 keeps it."""
    events_max_age_s: float = 0
    """Max age of LOOPWIRE_EVENTS messages; 0 keeps them."""
    ingress_max_age_s: float = 24 * 3600
    """Max age of LOOPWIRE_INGRESS messages (an audit trail of what users sent; the
    router's durable consumer tracks what it applied); 0 keeps them."""
    work_max_age_s: float = 7 * 24 * 3600
    """Max age of a LOOPWIRE_WORK message: one that outlived every delivery attempt is
    dropped after this; 0 keeps them."""

    # -- limits ---------------------------------------------------------------------------
    max_body_bytes: int = 256 * 1024
    """Ingress bodies larger than this are rejected with an `error` event."""
    max_body_depth: int = 32
    """Ingress bodies (and queries) nested deeper than this many levels of objects and
    arrays are rejected with an `error` event (`body_too_deep`)."""

    # -- read by more than one service, or by the runtime for a service -----------------
    # (a service reads no other service's settings; the dispatcher bounds memory's
    # summarize ask, shared/runtime/dispatcher.py)
    default_model: str = "claude-sonnet-4-5"
    """Model of a run whose StartRun names none."""
    prices: dict[str, dict[str, float]] = Field(default_factory=dict)
    """JSON object of model prices in USD per million tokens, added to (or overriding) the
    built-in table (shared/runtime/pricing.py): `{"my-model": {"input": 1.0, "output": 5.0,
    "cache_read": 0.1, "cache_write": 1.25}}`; a model id uses its longest known prefix. A
    start with `limits.max_cost_usd` whose models are not all priced is refused
    (`unpriced_model`)."""
    llm_timeout_s: float = 600.0
    """Timeout of one model request."""
    executor_timeout_s: float = 3600.0
    """Longest one agent turn may take (its process is stopped then, the step fails)."""
    tool_timeout_s: float = 120.0
    """Per-call timeout; a call that takes longer gets an error result."""
    memory_model: str | None = None
    """Model of the memory's own calls (compaction summaries, observations, reflections)
    for a run whose StartRun names none (`model.memory`, or `model.lightweight` with
    `model.selection: auto`); unset: the run's own models.
    Their tokens count in the run's usage and cost at this model's price."""
    memory_summary_timeout_s: float = 120.0
    """How long the memory service waits for a summary from the llm service before it
    falls back to dropping the oldest messages from the request."""
    memory_token_counting: str = "auto"
    """`api` (Anthropic's count_tokens), `estimate`, or `auto` (api when the llm service
    talks to Anthropic, i.e. ANTHROPIC_API_KEY or ANTHROPIC_BASE_URL is set)."""
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
    model_limits: Annotated[dict[str, ModelLimit], NoDecode] = Field(default_factory=dict)
    """JSON object `{"<model id>" or "<prefix>*": {"rpm": int, "input_tpm": int,
    "output_tpm": int, "max_concurrent": int}}` (any may be omitted): what the whole
    deployment sends to a model, held in Redis for every llm replica; a generation over a
    limit waits (`model.throttled`), a 429/529's `retry-after` pauses every replica
    (docs/services/llm.md, "Model limits"). Unset: nothing is held back."""
    discovery_interval_s: float = 2.0
    """How often tool providers are discovered with $SRV.INFO."""
    discovery_misses: int = 3
    """A provider that misses this many discovery rounds in a row is forgotten."""

    # -- logging and tracing ----------------------------------------------------------------
    otel_capture_content: bool = False
    """Record message contents (prompts, completions, tool arguments and results) on the
    trace spans, redacted; off by default. Trace export itself is asked for with the
    standard `OTEL_EXPORTER_OTLP_ENDPOINT` (docs/observability.md)."""
    log_level: str = "INFO"
    """Log level of the services."""
    log_json: bool = False
    """JSON log lines (with session, run and trace ids) instead of text."""

    @field_validator("memory_token_counting")
    @classmethod
    def _token_counting(cls, value: str) -> str:
        mode = value.strip().lower()
        if mode not in ("auto", "api", "estimate"):
            raise ValueError(f"LOOPWIRE_MEMORY_TOKEN_COUNTING must be auto, api or estimate, not {mode!r}")
        return mode

    @field_validator("tool_policy", "tenant_limits", "model_limits", mode="before")
    @classmethod
    def _json_object(cls, value: object) -> object:
        return json_object(value)

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
