"""What the router alone keeps of a session's state. The state itself (SessionState, RunState
and what they hold) is a contract type, read by the other services too:
shared/contract/session_state.py and shared/contract/run_state.py."""

from __future__ import annotations

RECENT_INPUTS = 64
"""How many applied ingress input ids a session remembers to recognise redeliveries."""
