"""The router's own settings (``LOOPWIRE_*``): loop control, profiles, the operator's
policy of workspaces and tenants, deleting sessions. The runtime's settings, and those
the router shares with other services, are RuntimeSettings' (shared/runtime/settings.py).

In core/ because `CoreConfig`'s defaults are these fields' (config.py) and the core may
not import the shell; the class only declares the fields, and the environment is read
where the launcher builds the process's `Settings` (loopwire/settings.py)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from loopwire.shared.runtime.settings import RuntimeSettings


class RouterSettings(RuntimeSettings):
    router_max_handlers: int = Field(default=64, gt=0)
    """Work messages one router replica handles at once (each of its consumers: ingress,
    results): its work is CPU-bound, so more would only queue inside the process."""
    audit_hmac_key: str | None = None
    """Key of the HMAC that names a deleted session in its audit record
    (`session.delete`: who asked, when, what was removed, never the session's id); unset:
    a random key the first delete stores in Redis."""
    delete_settle_s: float = 5.0
    """After a `session.delete`, its sweep again this many seconds later: what a step in
    flight when it ran wrote afterwards (0: none)."""
    default_max_tokens: int = 4096
    """max_tokens of a run whose StartRun names none."""
    lightweight_model: str | None = None
    """The lightweight model of a run with `model.selection: auto` whose StartRun names no
    `model.lightweight`; with neither, `auto` has no lightweight model and the run gets a
    `warning` (`no_lightweight_model`) once."""

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
    tenant_metrics_labels: int = 20
    """Distinct `tenant` label values one process gives the loopwire_tenant_* metrics
    (tenants named in LOOPWIRE_TENANT_LIMITS first); the others are counted as `other`."""
    tenant_sweep_s: float = 10.0
    """How often a router reconciles the tenants' slots and queues with their sessions
    (a slot whose run ended while its router crashed is released, a run granted a slot
    that nobody started is started) and refreshes the loopwire_tenant_* gauges."""

    @field_validator("workspace_roots", mode="before")
    @classmethod
    def _split_roots(cls, value: object) -> object:
        if isinstance(value, str):
            return [part for part in value.split(":") if part.strip()]
        return value
