"""The NATS headers that name who a work message is about.

Set by the publishing bus (runtime/bus.py) on every work envelope, read back by the
consumers' context middleware (observability/context_middleware.py) for their log lines,
and by the dead-letter reader (runtime/dead_letters.py) to say whose work was given up.
"""

SESSION_HEADER = "Loopwire-Session-Id"
RUN_HEADER = "Loopwire-Run-Id"
