"""The contract layer: what goes over the wire and what every layer above agrees on.

The public models of docs/protocol.md (protocol.py) and their egress events (events.py),
the internal envelopes between services (envelopes.py), subjects and headers, the JSON
codec, the checks on client bodies (input_guard.py) and the redaction of secrets. It
imports no other layer of loopwire (docs/architecture.md, checked by `lint-imports`).
"""
