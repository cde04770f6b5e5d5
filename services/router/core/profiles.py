"""Every profile in one table: its stages, its phases and their transitions, its defaults.

A profile is data:

- `stages`: the post-generation stages, in order (stages.py); the first that answers
  decides the next step;
- `phases`, `transitions`: the profile's phases (`RunState.profile_phase`) and the only
  moves allowed between them (the profile's transition table). Every run starts in
  `init` and moves at once to the profile's first working phase (`working_phase`); a run
  that ends `completed` moves to `done` before its `run.ended`. Every move goes through
  `phases.change_phase`, which raises `IllegalTransition` for a move not in the table and
  returns the `phase.changed` event. A run that ends otherwise (abort, limits, a failure)
  ends in the phase it is in: `run.ended` is the terminal event, not a phase change;
- what it offers: tools (`offers_tools`), the reserved finish tool (`offers_finish`),
  a plan (`planned`), a human review of every turn (`reviews_every_turn`);
- its defaults, which StartRun `limits` (or a strategy config, or the settings) override.

| profile | transitions | max_turns | compaction_at_pct | progress_injection |
|---|---|---|---|---|
| agentic, conversational | init→execute, execute→done | 50 / 100 | 0.8 | system_reminder / none |
| agentic_planned | init→plan, plan→execute, execute→execute, execute→verify, verify→done; plan→done, execute→done | 100 | 0.8 | system_reminder |
| turn_by_turn | init→review, review→review, review→execute, execute→review, execute→done; review→done | 200 | 0.8 | none |
| claude_code, opencode, codex, acp | init→execute, execute→done | 50 | 0.8 | system_reminder (the agent's system prompt) |

The moves after `;` are the ones a run completes by outside the designed path: the finish
tool called before the verification, or a reply cut by `max_tokens` (it ends the run with
what it has): a completed run always reports `done`.

The executor profiles' stages are listed in executor_profiles.py: an external agent
makes each generation, the router routes its answer and nudges it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .approval import ReviewStage
from .executor_profiles import ACP_PIPELINE, CLI_PIPELINE, EXECUTOR_STAGES
from .finish import FinishStage
from .loop_detection import LoopDetectionStage
from .planning import PlanStage
from .stages import CommitmentGateStage, RoutingStage, Stage, VacuousAnswerStage

ModelTier = Literal["primary", "lightweight", "any"]
"""Which of the run's models does a piece of work (step_requests.py, its model tiers)."""


@dataclass(frozen=True)
class Profile:
    name: str
    offers_tools: bool
    stages: tuple[Stage, ...]
    phases: tuple[str, ...] = ("init", "execute", "done")
    """The profile's phases: `init` first, `done` last."""
    transitions: dict[str, frozenset[str]] = field(default_factory=lambda: _moves("init->execute", "execute->done"))
    """phase -> the phases it may move to. Anything else raises IllegalTransition."""
    max_turns: int = 50
    compaction_at_pct: float = 0.8
    progress_injection: str = "system_reminder"
    """`system_reminder`: after tool results the next generation is reminded of the task
    and the progress (tool_batches.py, the progress note); `none`: no reminder."""
    max_inner_iterations: int = 100
    """Generations per outer iteration (LOOPWIRE_MAX_INNER_ITERATIONS overrides)."""
    max_outer_iterations: int = 10
    """Times one run takes follow-ups at the outer boundary (LOOPWIRE_MAX_OUTER_ITERATIONS)."""
    single_generation: bool = False
    """One answer per run (conversational): follow-ups start new runs instead of being
    taken at the outer boundary. The run may still generate more than once for that
    answer: a vacuous answer retried, a `pause_turn` continued."""
    offers_finish: bool = False
    """The reserved tool `finish_agentic_task` is offered (finish.py)."""
    planned: bool = False
    """plan → execute → verify (planning.py)."""
    reviews_every_turn: bool = False
    """Every proposal waits for a human decision (approval.py)."""
    snapshots_workspace: bool = False
    """A run naming `metadata.workspace` gets its WorkspaceSnapshot (gathered by the shell at
    the start, shell/workspace_snapshot.py; rendered by workspace.py) as a note:
    in every phase until the run's first tool batch ran (after that the snapshot may be stale):
    agentic_planned's plan phase (in its plan note), and its execute and verify phases, also
    after a pre-built plan; turn_by_turn's review and execute."""
    executor: str | None = None
    """`cli` or `acp`: an external agent makes the generations (executor_profiles.py)."""
    pipeline: tuple[str, ...] = ()
    """The stages of an executor profile's loop, named as executor_profiles.py maps them."""
    model_tiers: dict[str, ModelTier] = field(default_factory=dict)
    """phase -> the model tier of its generations (step_requests.py, its model tiers); `primary` when unnamed."""
    notes: str = field(default="", compare=False)

    @property
    def initial_phase(self) -> str:
        return INIT

    @property
    def working_phase(self) -> str:
        """The phase a run moves to from `init` as it starts (the table has exactly one)."""
        (phase,) = self.transitions[INIT]
        return phase

    def can_complete_from(self, phase: str) -> bool:
        return DONE in self.transitions.get(phase, frozenset())


INIT = "init"
DONE = "done"


def _moves(*pairs: str) -> dict[str, frozenset[str]]:
    """`"a->b"` strings as a transition table."""
    table: dict[str, set[str]] = {}
    for pair in pairs:
        frm, to = pair.split("->")
        table.setdefault(frm, set()).add(to)
    return {k: frozenset(v) for k, v in table.items()}


# Order matters: the first stage that answers decides. The finish tool is intercepted
# first (before anything judges or runs the turn), loops are checked before the answer's
# quality (a repeated empty answer is passed through, not retried again), the quality
# before the commitment gate, the plan phases next, and the routing table last (it
# always answers).
_AGENTIC_STAGES: tuple[Stage, ...] = (FinishStage(), LoopDetectionStage(), VacuousAnswerStage(),
                                      CommitmentGateStage(), RoutingStage())
_PLANNED_STAGES: tuple[Stage, ...] = (FinishStage(), LoopDetectionStage(), VacuousAnswerStage(),
                                      CommitmentGateStage(), PlanStage(), RoutingStage())
# turn_by_turn: the user reviews every proposal, so review replaces plain
# routing; the commitment gate comes first, so a reply that only promises an action is
# asked to act (a proposal the user could approve) before it reaches the user.
_TURN_BY_TURN_STAGES: tuple[Stage, ...] = (LoopDetectionStage(), VacuousAnswerStage(), CommitmentGateStage(),
                                           ReviewStage())

PROFILES: dict[str, Profile] = {
    "agentic": Profile(
        "agentic", offers_tools=True, stages=_AGENTIC_STAGES,
        max_turns=50, compaction_at_pct=0.8, progress_injection="system_reminder",
        max_inner_iterations=100, max_outer_iterations=10, offers_finish=True),
    "agentic_planned": Profile(
        "agentic_planned", offers_tools=True, stages=_PLANNED_STAGES,
        phases=("init", "plan", "execute", "verify", "done"),
        # execute->execute: a reply that ends its turn with steps still open is sent back
        # to carry them out (planning.PlanStage).
        transitions=_moves("init->plan", "plan->execute", "execute->execute", "execute->verify", "verify->done",
                           "plan->done", "execute->done"),
        max_turns=100, compaction_at_pct=0.8, progress_injection="system_reminder",
        max_inner_iterations=150, max_outer_iterations=10, offers_finish=True, planned=True,
        snapshots_workspace=True, model_tiers={"plan": "lightweight"}),
    "turn_by_turn": Profile(
        "turn_by_turn", offers_tools=True, stages=_TURN_BY_TURN_STAGES,
        phases=("init", "review", "execute", "done"),
        transitions=_moves("init->review", "review->review", "review->execute", "execute->review", "execute->done",
                           "review->done"),
        max_turns=200, compaction_at_pct=0.8, progress_injection="none",
        max_inner_iterations=200, max_outer_iterations=10, reviews_every_turn=True, snapshots_workspace=True),
    "conversational": Profile(
        "conversational", offers_tools=False, stages=(VacuousAnswerStage(), RoutingStage()),
        max_turns=100, compaction_at_pct=0.8, progress_injection="none",
        max_inner_iterations=10, max_outer_iterations=1, single_generation=True),
    # External executors: a coding agent's own loop makes each generation (one step is
    # one turn of the agent); the llm service answers `unsupported_profile` for an agent
    # it has no executor for (services/llm/executors/registry.py).
    **{name: Profile(name, offers_tools=True, stages=EXECUTOR_STAGES, max_turns=50,
                     compaction_at_pct=0.8, progress_injection="system_reminder", max_inner_iterations=100,
                     max_outer_iterations=10, executor="acp" if name == "acp" else "cli",
                     pipeline=ACP_PIPELINE if name == "acp" else CLI_PIPELINE)
       for name in ("claude_code", "opencode", "codex", "acp")},
}
"""Every profile by name. A run's is `PROFILES[run.config.profile]`: the name is one of the
contract's `Profile` names (shared/contract/protocol.py), checked as the request is parsed."""
