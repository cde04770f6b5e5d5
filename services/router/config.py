"""The router core's configuration: the defaults and the loop-control knobs.

One frozen dataclass, built from Settings by the shell (`CoreConfig.from_settings`), so
the core itself never reads the environment and tests pass exactly what they mean.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CoreConfig:
    default_model: str = "claude-sonnet-4-5"
    default_max_tokens: int = 4096
    max_inner_iterations: int = 0
    """Generations per outer iteration; 0: the profile's default."""
    max_outer_iterations: int = 0
    """Outer iterations per run; 0: the profile's default."""
    budget_warning_pct: float = 0.8
    loop_repeat_threshold: int = 3
    loop_text_repeats: int = 2
    vacuous_max_retries: int = 2
    commitment_max_nudges: int = 2
    context_retries: int = 1
    max_subagent_depth: int = 3
    """A child run deeper than this is refused (subagent.py)."""

    @classmethod
    def from_settings(cls, settings: Any) -> CoreConfig:
        names = [f for f in cls.__dataclass_fields__ if hasattr(settings, f)]
        return cls(**{n: getattr(settings, n) for n in names})
