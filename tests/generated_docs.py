"""Rewrites the docs that are generated from the code (`make docs`): the README's settings
table (from shared/runtime/settings.py) and docs/asyncapi.json (from loopwire/asyncapi.py).
tests/unit/docs/test_sync.py and tests/unit/loopwire/test_asyncapi.py fail when either is
out of date; this is what their messages ask for.

    .venv/bin/python -m tests.generated_docs
"""

from __future__ import annotations

from loopwire.asyncapi import asyncapi_json
from loopwire.shared.runtime.settings import settings_table
from tests.paths import REPO

START = "<!-- settings-table:start"
END = "<!-- settings-table:end -->"


def regenerate() -> list[str]:
    """Write both; the paths whose text changed."""
    changed = []
    readme = REPO / "README.md"
    text = readme.read_text()
    start = text.index("\n", text.index(START)) + 1
    end = text.index(END)
    new = text[:start] + settings_table() + text[end:]
    if new != text:
        readme.write_text(new)
        changed.append("README.md")
    spec = REPO / "docs" / "asyncapi.json"
    if not spec.exists() or spec.read_text() != asyncapi_json():
        spec.write_text(asyncapi_json())
        changed.append("docs/asyncapi.json")
    return changed


if __name__ == "__main__":
    print("rewrote: " + (", ".join(regenerate()) or "nothing (already up to date)"))
