"""The stores layer: session state, step records, the event log, blobs (Redis, and in
memory for tests) and the events stream read back (event_archive.py, seq_floor.py).

Built on the contract layer only (docs/architecture.md, checked by `lint-imports`).
"""
