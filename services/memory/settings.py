"""The memory service's own settings (``LOOPWIRE_*``): context assembly, compaction,
token counting, observations and reflections. The runtime's settings, and those the
memory service shares with other services (the memory model, the token counting mode),
are RuntimeSettings' (shared/runtime/settings.py)."""

from __future__ import annotations

from pydantic import Field

from loopwire.shared.runtime.settings import RuntimeSettings


class MemorySettings(RuntimeSettings):
    memory_max_handlers: int = Field(default=64, gt=0)
    """Context assemblies one memory replica handles at once (CPU-bound, as the router)."""

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
    memory_observe_every_turns: int = 10
    """An observation is written after this many model turns; 0 disables observations."""
    memory_reflect_every_observations: int = 5
    """A reflection is written after this many observations; 0 disables reflections."""
    memory_observations_in_context: int = 5
    """Latest observations hydrated into the system prompt."""
    memory_reflections_in_context: int = 3
    """Latest reflections hydrated into the system prompt."""
