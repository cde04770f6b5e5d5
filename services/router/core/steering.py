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

from typing import Any, Literal

from loopwire.shared.contract.run_state import RunState

from .next_step import EventSpec

Source = Literal["priority_queue", "follow_up_queue", "loop_redirect", "model_switch", "retry_reduced_context"]


def steering_fields(run: RunState, source: Source, **extra: Any) -> dict[str, Any]:
    """The fields of a `steering` event: `source`, the run's turn, then what the path adds."""
    return {"source": source, "turn": run.turn, **{k: v for k, v in extra.items() if v is not None}}


def steering_spec(run: RunState, source: Source, **extra: Any) -> EventSpec:
    """The `steering` event of a stage's next step."""
    return EventSpec("steering", steering_fields(run, source, **extra))
