"""The id generator that lets a run's root span be recorded with ids drawn at its start."""

from __future__ import annotations

from contextvars import ContextVar

from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

# A run outlives any one handler (and may outlive a process), so its `invoke_agent` span
# cannot be held open in memory. Instead the router draws the run's trace id and root span
# id when the run starts, stores them (as a traceparent) in the session state, parents
# every step's spans on them, and records the root span itself when the run ends, with
# those very ids and the run's start time — whichever replica ends the run.
preset_ids: ContextVar[tuple[int, int] | None] = ContextVar("loopwire_preset_ids", default=None)


class RunIdGenerator(RandomIdGenerator):
    """Random ids, except while a preset (trace id, span id) is in force."""

    def generate_trace_id(self) -> int:
        preset = preset_ids.get()
        return preset[0] if preset else super().generate_trace_id()

    def generate_span_id(self) -> int:
        preset = preset_ids.get()
        return preset[1] if preset else super().generate_span_id()
