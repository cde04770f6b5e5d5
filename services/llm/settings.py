"""The llm service's own settings (``LOOPWIRE_*``): the provider, retries, the circuit
breaker, the model limits' wait, the external executors. The runtime's settings, and
those the llm service shares with other services (the default model, the timeouts, the
model limits), are RuntimeSettings' (shared/runtime/settings.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from loopwire.shared.runtime.settings import RuntimeSettings, json_object


class LlmSettings(RuntimeSettings):
    llm_max_handlers: int = Field(default=4096, gt=0)
    """Generations one llm replica holds in flight: each waits on the provider and costs a
    coroutine and its request, so a replica holds thousands (the model client's
    connection pool is sized to it); the provider's limits bound what is sent."""

    # -- llm ------------------------------------------------------------------------------
    llm_provider: str = "auto"
    """`anthropic`, `scripted`, or `auto` (anthropic when ANTHROPIC_API_KEY or
    ANTHROPIC_BASE_URL is set, otherwise the scripted offline model)."""
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

    @field_validator("acp_agents", mode="before")
    @classmethod
    def _acp_agents_json(cls, value: object) -> object:
        return json_object(value)
