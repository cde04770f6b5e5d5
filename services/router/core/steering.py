"""Steering progress: the `steering` event, one per path that changes a run's course.

`source` names the path (shared/protocol.md, "Phases, answers and progress"):

| source | where the loop takes it |
|---|---|
| `priority_queue` | a `steer` applied to a running run (follow_ups.steer) |
| `follow_up_queue` | queued `message`s taken at the outer boundary (follow_ups.take_at_outer_boundary) |
| `loop_redirect` | the loop ladder's redirect rung (loop_detection.py) |
| `model_switch` | the ladder's switch rung (the next model, or a raised temperature without one), and the error policy's `switch_model` for a model id the API does not know (decide.py) |
| `retry_reduced_context` | the error policy's answer to `context_too_long` (decide.py) |

Besides `source` the event carries the run's `turn` and, where the path has them,
`reason` (the detection, the error code), `messages` (how many follow-ups were taken),
`to_model` or `temperature`, and for `priority_queue` `interrupted`: what the steer cut
short (`generation`, `tools`, `approval`; absent between steps).

The agent-loop design names four more sources; each is one of these with its detail:
`priority_interrupt` is `priority_queue` between steps, `mid_gen_priority` is
`priority_queue` with `interrupted: "generation"`, `cancel_executing` is `priority_queue`
with `interrupted: "tools"`, and `loop_model_switch` is `model_switch` with
`reason: "loop_detected"`.
"""

from __future__ import annotations

from typing import Literal

from loopwire.shared.contract.event_fields import SteeringFields, SteeringSource
from loopwire.shared.contract.run_state import RunState

from .next_step import EventSpec


def steering_fields(run: RunState, source: SteeringSource, *, reason: str | None = None,
                    messages: int | None = None, to_model: str | None = None, temperature: float | None = None,
                    interrupted: Literal["generation", "tools", "approval"] | None = None) -> SteeringFields:
    """The fields of a `steering` event: `source`, the run's turn, then what the path adds
    (a detail given as None is left out)."""
    fields: SteeringFields = {"source": source, "turn": run.turn}
    if reason is not None:
        fields["reason"] = reason
    if messages is not None:
        fields["messages"] = messages
    if to_model is not None:
        fields["to_model"] = to_model
    if temperature is not None:
        fields["temperature"] = temperature
    if interrupted is not None:
        fields["interrupted"] = interrupted
    return fields


def steering_spec(run: RunState, source: SteeringSource, *, reason: str | None = None,
                  to_model: str | None = None, temperature: float | None = None) -> EventSpec:
    """The `steering` event of a stage's next step."""
    return EventSpec("steering", steering_fields(run, source, reason=reason, to_model=to_model,
                                                 temperature=temperature))
