"""Comments and reference pages say what is, not the project's history: no issue numbers in
the code or in docs/ (docs/bench-notes/ is a lab notebook, outside the rule)."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.unit

ISSUE = re.compile(r"\bissue \d+", re.I)


def test_no_issue_numbers_in_code_or_reference_docs() -> None:
    roots = [REPO / "services", REPO / "shared", REPO / "loopwire", REPO / "docs"]
    found = []
    for root in roots:
        for path in root.rglob("*"):
            if path.suffix not in (".py", ".md") or "bench-notes" in path.parts:
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if ISSUE.search(line):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)


def test_the_protocol_page_states_what_is_not_when_it_came() -> None:
    """docs/protocol.md has no **addition** markers and no dates: CHANGELOG.md keeps the history."""
    text = (REPO / "docs" / "protocol.md").read_text()
    assert "**addition**" not in text.lower()
    dates = re.findall(r"\b20\d\d-[01]\d-[0-3]\d\b", text)
    assert not dates, dates
