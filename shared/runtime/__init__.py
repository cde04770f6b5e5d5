"""The runtime layer: what a service runs on.

The runtime's settings (each service's own are in its folder) and credentials, the broker
wiring (service_context.py: `ServiceContext`, work subscribers), the publishing bus, the
one handler runner that owns acknowledgement and redelivery (chain.py with redelivery.py),
work chains and their balance, in-flight steps, dead letters and the JetStream streams.
Built on the stores and the contract; what it reports to observability goes through
hooks.py (docs/architecture.md, checked by `lint-imports`).
"""
