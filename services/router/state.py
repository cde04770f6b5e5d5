"""The router's durable state of one session, stored as one JSON document per session.

Persisted state carries a schema version (`schema`); a change that old readers cannot
read bumps it, and `SessionState.load` upgrades older documents (table in
docs/architecture.md).
"""

from __future__ import annotations

from typing import Any, Literal

from loopwire.shared.envelopes import Usage
from pydantic import BaseModel, Field

STATE_SCHEMA = 1
RECENT_INPUTS = 64
"""How many applied input ids a session remembers to recognise redeliveries."""


class RunConfig(BaseModel):
    """What a run was started with (kept so a follow-up `message` on an idle session
    starts its new run with the same settings)."""

    profile: str = "agentic"
    system: str | None = None
    models: list[str]
    max_tokens: int
    temperature: float | None = None
    tools: list[str] | None = None
    tool_permissions: dict[str, str] = Field(default_factory=dict)
    max_turns: int = 50
    max_total_tokens: int | None = None
    max_cost_usd: float | None = None
    context_window: int = 200_000
    compaction_at_pct: float = 0.8
    metadata: dict[str, Any] = Field(default_factory=dict)


class RunState(BaseModel):
    run_id: str
    config: RunConfig
    phase: str = "generate"
    """`generate` (a model call is in flight), `tools` (tool calls are in flight), `done`."""
    turn: int = 0
    """Generations completed in this run."""
    pending_step: str | None = None
    """The step id whose result the run waits for; any other result is stale."""
    pending_calls: list[dict[str, Any]] = Field(default_factory=list)
    """tool_use blocks of the last assistant message while their results are awaited."""
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    last_text: str = ""
    """Text of the latest assistant message: the best answer so far."""


class SessionState(BaseModel):
    schema_version: int = Field(default=STATE_SCHEMA, alias="schema")
    session_id: str
    status: Literal["idle", "running", "awaiting_approval"] = "idle"
    run: RunState | None = None
    last_config: RunConfig | None = None
    history_len: int = 0
    runs: int = 0
    turns: int = 0
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = 0.0
    queued: list[dict[str, Any]] = Field(default_factory=list)
    """Follow-up user messages waiting for the next outer boundary."""
    steering: list[dict[str, Any]] = Field(default_factory=list)
    """Steering messages: applied at the next boundary, before queued follow-ups."""
    recent_inputs: list[str] = Field(default_factory=list)
    """Ids of the latest applied inputs (ingress seqs, step ids): redeliveries are no-ops."""
    outbox: list[dict[str, Any]] = Field(default_factory=list)
    """Effects of the latest transition; performed again when its input is redelivered
    (a crash between commit and publish loses nothing; every effect is idempotent)."""
    outbox_input: str | None = None

    model_config = {"populate_by_name": True}

    @classmethod
    def load(cls, raw: dict[str, Any] | None, session_id: str) -> SessionState:
        if raw is None:
            return cls(session_id=session_id)
        return cls.model_validate(raw)

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)

    @property
    def profile(self) -> str | None:
        if self.run is not None:
            return self.run.config.profile
        return self.last_config.profile if self.last_config else None
