"""How long a run may go on: turns, inner iterations, outer iterations.

- `max_turns` (StartRun `limits.max_turns`, else the profile's): generations in the run;
- `max_inner_iterations` (LOOPWIRE_MAX_INNER_ITERATIONS, else the profile's): tool rounds
  (batches whose results came back) in one outer iteration, i.e. since the run started
  or last took follow-ups;
- `max_outer_iterations` (LOOPWIRE_MAX_OUTER_ITERATIONS, else the profile's): outer
  iterations, i.e. times follow-up `message`s are taken at the outer boundary.

A turn that wants another generation past a limit ends the run instead, with its best
answer and status `max_turns`. A turn that asks for tools at a limit still has them run:
the batch is the last round, its results join the history and the run's summary, and
then the run ends `max_turns` (tool_batches.after_batch). `run.ended.reason` (an
addition) says which limit it was: `max_turns`, `max_inner_iterations` or
`max_outer_iterations`. Follow-ups that arrive past the outer limit stay out of the
capped run: they start the next run, as on an idle session (run_lifecycle.end_run),
and the capped run ends with the answer it gave.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loopwire.shared.contract.run_state import RunState

from .config import CoreConfig

if TYPE_CHECKING:
    from .profiles import Profile


def inner_limit(run: RunState, profile: Profile, cfg: CoreConfig) -> str | None:
    """The limit that forbids another generation (or, after a batch, another round) in
    this outer iteration, or None."""
    if run.turn >= run.config.max_turns:
        return "max_turns"
    if run.limits.inner >= (cfg.max_inner_iterations or profile.max_inner_iterations):
        return "max_inner_iterations"
    return None


def outer_limit(run: RunState, profile: Profile, cfg: CoreConfig) -> str | None:
    """`max_outer_iterations` when the run may not take follow-ups once more, or None."""
    return ("max_outer_iterations" if run.limits.outer >= (cfg.max_outer_iterations or profile.max_outer_iterations)
            else None)
