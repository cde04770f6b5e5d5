"""Moving a run from one profile phase to the next, through the profile's table.

Every change goes through `change_phase`: it checks the move against the profile's
`transitions` (profiles.py) and raises `IllegalTransition` for a move the table does not
list, so a wrong move fails loudly (in tests; in production the input is redelivered
and logged, never silently applied). It returns the `phase.changed` event to emit.

The table is passed in (the stages get it with the turn, `Turn.transitions`): profiles.py
imports the stages, so nothing a stage imports may import profiles.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from loopwire.shared.contract.run_state import RunState

from .next_step import EventSpec

Transitions = Mapping[str, frozenset[str]]
"""A profile's transition table: phase -> the phases it may move to (`Profile.transitions`)."""


class IllegalTransition(RuntimeError):
    """A phase change the profile's transition table does not allow."""


def check_transition(profile_name: str, transitions: Transitions, frm: str, *, to: str) -> None:
    if to not in transitions.get(frm, frozenset()):
        allowed = ", ".join(sorted(transitions.get(frm, frozenset()))) or "nothing"
        raise IllegalTransition(f"profile {profile_name}: {frm!r} -> {to!r} is not allowed "
                                f"(from {frm!r}: {allowed})")


def change_phase(run: RunState, to: str, transitions: Transitions) -> EventSpec:
    """Move `run` to phase `to` along its profile's `transitions`; the `phase.changed`
    event (`from`, `to`) to emit."""
    frm = run.profile_phase
    check_transition(run.config.profile, transitions, frm=frm, to=to)
    run.profile_phase = to
    run.phase_changes += 1
    return EventSpec("phase.changed", {"from": frm, "to": to})
