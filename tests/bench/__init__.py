"""`make bench`: loopwire's speed targets, measured against the raw NATS/Redis floor.

Not a test suite: pytest collects nothing here (no `test_*` modules). See run_bench.py.
"""
