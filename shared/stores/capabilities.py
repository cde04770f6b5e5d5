"""The named optional capabilities of the stores: what a backend may offer beyond its protocol.

Every store protocol (SessionStore, EventLogStore, StepStore) is the contract every backend
implements in full, in memory and in Redis alike; a few methods are extras only some
backends can offer (the langgraph checkpoint savers' idea). A caller asks the store,
`store.supports(Capability.X)`, never its class; a backend without the capability refuses
its method with `Unsupported` instead of half-doing it. The conformance suite
(loopwire.testing.store_conformance) checks each capability on the backends that declare
it, and the refusal on the others.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar, Protocol


class Capability(StrEnum):
    COMMIT_WITH_EVENTS = "commit_with_events"
    """SessionStore.commit_with_events: a transition's state, history and events written
    at once (all of them or, when the version moved, none), the events into the event log
    of the same backend, which declares it too (the router commits so when both do)."""
    SEQ_FLOOR = "seq_floor"
    """EventLogStore.raise_seq: the session's seq counter moved up to a floor. A backend
    that may lose its data while the events stream keeps the events declares it (the
    router continues a lost session's seqs after the stream's last one)."""
    PIPELINED_HISTORY = "pipelined_history"
    """SessionStore.pipelined_history: the history is on the context's Redis, so another
    Redis store reads parts of it in its own round trip, through the reader the session
    store hands out (session_store.PipelinedHistory: the memory service reads the history
    with its snapshot)."""


class Unsupported(NotImplementedError):
    """The store does not offer this capability (its `supports` says so)."""


class Store(Protocol):
    def supports(self, capability: Capability) -> bool:
        """Whether this store offers `capability`."""
        ...


class Declares:
    """`supports` from the capabilities a backend class declares."""

    capabilities: ClassVar[frozenset[Capability]] = frozenset()

    def supports(self, capability: Capability) -> bool:
        return capability in self.capabilities
