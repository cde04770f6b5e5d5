"""The type of the `unretrieved_errors` fixture (tests/conftest.py), for the tests that ask for it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

LostErrors = Callable[[], Awaitable[list[dict[str, object]]]]
"""Collects garbage, then returns what the loop reported as "Future exception was never retrieved"."""
