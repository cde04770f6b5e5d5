"""The ids derived from a run's steps: step ids, the Nats-Msg-Id of each work message and
result, and the dedup key of each event.

Each is the same on every delivery of the same step and from every replica that computes
it, so JetStream's duplicate window drops a message published twice and the event log
stores an event once. One owner per id: no other module spells a step's suffix
(tests/unit checks it).
"""

from __future__ import annotations

from typing import NamedTuple


def generation_step_id(run_id: str, gen_seq: int) -> str:
    return f"{run_id}:g{gen_seq}"


def tools_step_id(run_id: str, turn: int) -> str:
    return f"{run_id}:t{turn}"


class StepIds(NamedTuple):
    """The ids a step of a run is published with: its own and its work message's."""

    step_id: str
    msg_id: str
    """The Nats-Msg-Id of the step's work (`memory.assemble`, `tools.execute`)."""


class ToolBatchIds(NamedTuple):
    """The ids a tool batch uses: its step's, its `tools.execute` message's, and the
    `tool.call` event key of each call, in the batch's order."""

    step_id: str
    msg_id: str
    call_keys: list[str]


def generation_step_ids(run_id: str, gen_seq: int) -> StepIds:
    """The next generation's step id and its `memory.assemble` message id."""
    step_id = generation_step_id(run_id, gen_seq)
    return StepIds(step_id, assemble_msg_id(step_id))


def tool_batch_ids(run_id: str, turn: int, call_ids: list[str]) -> ToolBatchIds:
    """The ids of the tool batch of turn `turn`, whose calls are `call_ids`."""
    step_id = tools_step_id(run_id, turn)
    return ToolBatchIds(step_id, execute_msg_id(step_id), [tool_call_key(c) for c in call_ids])


def next_run_id(run_id: str) -> str:
    """The run a follow-up queued at the end of run `run_id` starts."""
    return f"{run_id}.next"


def direct_step_id(tool_use_id: str) -> str:
    """The step of a tool called directly (over the tools service's MCP endpoint), outside a run."""
    return f"direct:{tool_use_id}"


def memory_step_id(owner: str, what: str, *parts: int | str) -> str:
    """A memory-service model call (a summary, an observation, a reflection) of `owner` (a
    step id or a session id): `<owner>:<what>[:<part>...]`, the same on a repeat, so the
    llm service answers it from its record."""
    return ":".join([owner, what, *map(str, parts)])


def result_msg_id(step_id: str) -> str:
    """A step's result to the router: a re-publish after a crash is deduplicated."""
    return f"{step_id}:result"


def call_finished_msg_id(step_id: str, tool_use_id: str) -> str:
    """A finished call of a tool step, reported to the router before the step's result
    (envelopes.ToolCallFinished): its input id too, so a report sent again is applied once."""
    return f"{step_id}:{tool_use_id}:finished"


def assemble_msg_id(step_id: str) -> str:
    return f"{step_id}:assemble"


def generate_msg_id(step_id: str) -> str:
    return f"{step_id}:generate"


def execute_msg_id(step_id: str) -> str:
    return f"{step_id}:execute"


def permission_ask_msg_id(step_id: str, call_id: str, attempt: int) -> str:
    """An external agent's permission question, handed to the router."""
    return f"{step_id}:{call_id}:ask:{attempt}"


def dead_letter_msg_id(*, stream: str, stream_seq: int, subject: str, step_id: str | None, deliveries: int) -> str:
    """A dead letter (shared/runtime/dead_letters.py): one per message given up, by its place
    in its stream, else by its subject, step and delivery count."""
    return f"dead:{stream}:{stream_seq}" if stream_seq else f"dead:{subject}:{step_id}:{deliveries}"


def event_msg_id(sid: str, seq: int) -> str:
    """An event in LOOPWIRE_EVENTS: one message per (session, seq)."""
    return f"{sid}:{seq}"


def event_key(kind: str, *parts: int | str) -> str:
    """Dedup key of a session event: `<kind>:<part>[:<part>...]` (`tool.result:<tool_use_id>`,
    `run.ended:<run_id>`...), the same whenever the same event is emitted again (a
    redelivery, a decision made again), so the session stores it once."""
    return ":".join([kind, *map(str, parts)])


def tool_call_key(tool_use_id: str) -> str:
    """Dedup key of the `tool.call` event of a call, whoever emits it."""
    return event_key("tool.call", tool_use_id)


def tool_result_key(tool_use_id: str) -> str:
    """Dedup key of the `tool.result` event of a call, whoever emits it."""
    return event_key("tool.result", tool_use_id)


def step_event_key(step_id: str, what: str, *parts: int | str) -> str:
    """Dedup key of an event a step emits: `<step_id>:<what>[:<part>...]`, the same on
    every delivery of the step, so a redelivery stores it once."""
    return ":".join([step_id, what, *map(str, parts)])


def retract_key(step_id: str, attempt: int | str) -> str:
    """Dedup key of a `retracted` event of step `step_id` (`attempt`: a claim's number,
    `<n>.<discards>` for a fallback's discarded answer, `cancel`)."""
    return step_event_key(step_id, "retract", attempt)


def throttle_key(step_id: str, attempt: int, throttles: int) -> str:
    """Dedup key of the `throttles`-th `model.throttled` event of a step's `attempt`th claim."""
    return step_event_key(step_id, "throttle", f"{attempt}.{throttles}")


def fallback_key(step_id: str, switches: int) -> str:
    """Dedup key of the `model.fallback` event of a step's `switches`-th switch."""
    return step_event_key(step_id, "fallback", switches)


def compaction_key(step_id: str) -> str:
    """Dedup key of a step's `compaction` event, and the step that claims its usage."""
    return step_event_key(step_id, "compaction")


def admission_id(run_id: str, verdict: str) -> str:
    """A tenant's answer for waiting run `run_id`: its input id and Nats-Msg-Id, the same
    from every router that sends it, so the answer is applied once."""
    return f"admit:{run_id}:{verdict}"


def executor_delivery(step_id: str, delivered: int) -> str:
    """An external agent's `delivered`-th delivery of a step, whose events it keys."""
    return f"{step_id}:x{delivered}"
