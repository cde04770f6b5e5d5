"""Where things are, for tests in any folder of tests/."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""tests/ (fakes/, schemas/, node/, bench/)."""
REPO = TESTS.parent
"""The repository's root."""
