"""The router's core: `decide(state, input) -> Decision` (decide.py) and the rules it
applies, with no I/O. Nothing here imports a network, storage or file library, nor the
shell (tests/unit/router/test_core_is_pure.py; pyproject's import contract)."""
