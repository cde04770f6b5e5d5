"""Every profile in one table: its stages, its mode and its defaults.

A profile is data: the list of post-generation stages (see stages.py), whether tools
are offered, and the defaults a StartRun's `limits` (or the settings) may override.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .commitment_gate import CommitmentGateStage
from .loop_detection import LoopDetectionStage
from .stages import RoutingStage, Stage
from .vacuous import VacuousAnswerStage


@dataclass(frozen=True)
class Profile:
    name: str
    offers_tools: bool
    stages: tuple[Stage, ...]
    max_turns: int = 50
    compaction_at_pct: float = 0.8
    progress_injection: str = "system_reminder"
    """`system_reminder`: after tool results the next generation is reminded of the task
    and the progress (progress_injection.py); `none`: no reminder."""
    max_inner_iterations: int = 100
    """Generations per outer iteration (LOOPWIRE_MAX_INNER_ITERATIONS overrides)."""
    max_outer_iterations: int = 10
    """Times one run takes follow-ups at the outer boundary (LOOPWIRE_MAX_OUTER_ITERATIONS)."""
    single_generation: bool = False
    """One generation per run (conversational): follow-ups start new runs."""
    implemented: bool = True
    notes: str = field(default="", compare=False)


# Order matters: the first stage that answers decides. Loops are checked before the
# answer's quality (a repeated empty answer is passed through, not retried again), the
# quality before the commitment gate, and the routing table last (it always answers).
_AGENTIC_STAGES: tuple[Stage, ...] = (LoopDetectionStage(), VacuousAnswerStage(), CommitmentGateStage(),
                                      RoutingStage())

PROFILES: dict[str, Profile] = {
    "agentic": Profile("agentic", offers_tools=True, stages=_AGENTIC_STAGES, max_turns=50,
                       compaction_at_pct=0.8, progress_injection="system_reminder",
                       max_inner_iterations=100, max_outer_iterations=10),
    "conversational": Profile("conversational", offers_tools=False,
                              stages=(VacuousAnswerStage(), RoutingStage()),
                              max_turns=1, compaction_at_pct=0.85, progress_injection="none",
                              max_inner_iterations=10, max_outer_iterations=1, single_generation=True),
    # The profiles below are part of the contract; their own stages come with their issues.
    # Until then a StartRun naming them is answered with a clear `error` event.
    "agentic_planned": Profile("agentic_planned", True, _AGENTIC_STAGES, implemented=False),
    "turn_by_turn": Profile("turn_by_turn", True, _AGENTIC_STAGES, implemented=False),
    "claude_code": Profile("claude_code", True, _AGENTIC_STAGES, implemented=False),
    "opencode": Profile("opencode", True, _AGENTIC_STAGES, implemented=False),
    "codex": Profile("codex", True, _AGENTIC_STAGES, implemented=False),
    "acp": Profile("acp", True, _AGENTIC_STAGES, implemented=False),
}


def get_profile(name: str) -> Profile:
    return PROFILES[name]
