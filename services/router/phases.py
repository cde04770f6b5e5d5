"""Moving a run from one profile phase to the next, through the profile's table.

Every change goes through `change_phase`: it checks the move against the profile's
`transitions` (profiles.py) and raises `IllegalTransition` for a move the table does not
list, so a wrong move fails loudly (in tests; in production the input is redelivered
and logged, never silently applied). It returns the `phase.changed` event to emit.
"""

from __future__ import annotations

from .next_step import EventSpec
from .state import RunState


class IllegalTransition(RuntimeError):
    """A phase change the profile's transition table does not allow."""


def check_transition(profile_name: str, frm: str, to: str) -> None:
    from .profiles import get_profile  # profiles imports the stages, which import this

    profile = get_profile(profile_name)
    if to not in profile.transitions.get(frm, frozenset()):
        allowed = ", ".join(sorted(profile.transitions.get(frm, frozenset()))) or "nothing"
        raise IllegalTransition(f"profile {profile_name}: {frm!r} -> {to!r} is not allowed "
                                f"(from {frm!r}: {allowed})")


def change_phase(run: RunState, to: str) -> EventSpec:
    """Move `run` to phase `to`; the `phase.changed` event (`from`, `to`) to emit."""
    frm = run.profile_phase
    check_transition(run.config.profile, frm, to)
    run.profile_phase = to
    run.phase_changes += 1
    return EventSpec("phase.changed", {"from": frm, "to": to})
