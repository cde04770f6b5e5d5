"""Model limits (`LOOPWIRE_MODEL_LIMITS`, docs/protocol.md "Model limits"): what the
operator lets the whole deployment send to each model, whatever the number of llm replicas.

The operator's JSON object maps a model id, or a prefix ending in `*`, to its limits. A
model uses its own entry, else the longest prefix that matches it; the models of one prefix
share its limits (one key's budget). A request never names a limit.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LEASE_S", "ModelLimit", "ModelLimits"]

WINDOW_S = 60
"""The window `rpm`, `input_tpm` and `output_tpm` count in."""
LEASE_S = 30.0
"""How long a request's share of `max_concurrent` outlives a replica that stopped renewing it."""
REASONS = ("rpm", "input_tpm", "output_tpm", "concurrency", "cooldown")
"""Why a generation waits (`model.throttled.reason`)."""


class ModelLimit(BaseModel):
    """One key's limits; an omitted limit is no limit."""

    # A misspelt limit (`max_concurent`) stops the services at start-up instead of meaning "none".
    model_config = ConfigDict(extra="forbid", frozen=True)

    rpm: int | None = Field(default=None, gt=0)
    """Requests that may start in any 60 s window."""
    input_tpm: int | None = Field(default=None, gt=0)
    """Input tokens in any 60 s window (estimated before the call, corrected from the usage)."""
    output_tpm: int | None = Field(default=None, gt=0)
    """Output tokens in any 60 s window (counted as `max_tokens`, corrected from the usage)."""
    max_concurrent: int | None = Field(default=None, gt=0)
    """Requests in flight at once."""

    def public(self) -> dict[str, int]:
        return self.model_dump(exclude_none=True)


class ModelLimits(BaseModel):
    """The operator's table, and which of its keys a model counts against."""

    model_config = ConfigDict(frozen=True)

    entries: dict[str, ModelLimit] = Field(default_factory=dict)

    @classmethod
    def parse(cls, entries: dict[str, ModelLimit]) -> ModelLimits:
        for name in entries:
            if not name or "*" in name[:-1]:
                raise ValueError(
                    f"LOOPWIRE_MODEL_LIMITS: {name!r} is neither a model id nor a prefix "
                    "ending in * (such as `claude-sonnet-*`, or `*` for every model)"
                )
        return cls(entries=entries)

    def key_for(self, model: str) -> str | None:
        """The entry `model` counts against: its own, else its longest matching prefix."""
        if model in self.entries:
            return model
        best: str | None = None
        for name in self.entries:
            if name.endswith("*") and model.startswith(name[:-1]) and (best is None or len(name) > len(best)):
                best = name
        return best

    def for_model(self, model: str) -> tuple[str, ModelLimit] | None:
        key = self.key_for(model)
        return (key, self.entries[key]) if key is not None else None
