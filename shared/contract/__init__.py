"""The contract layer: what goes over the wire and what every layer above agrees on.

The public models of docs/protocol.md (protocol.py) and their egress events (events.py),
the internal envelopes between services (envelopes.py), subjects and headers, the JSON
codec, the checks on client bodies (input_guard.py), the redaction of secrets, and
the session's state the router writes and the other services read (session_state.py,
run_state.py). It imports no other layer of loopwire (docs/architecture.md, checked by `lint-imports`).
"""
