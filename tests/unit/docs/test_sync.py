"""Docs that are generated from the code stay in sync with it."""

from __future__ import annotations

import pytest

from loopwire.settings import settings_table
from tests.generated_docs import GENERATED
from tests.paths import REPO

pytestmark = pytest.mark.unit

README = REPO / "README.md"


def test_readme_settings_table_matches_the_settings() -> None:
    text = README.read_text()
    start = text.index("\n", text.index("<!-- settings-table:start")) + 1
    end = text.index("<!-- settings-table:end -->")
    assert text[start:end] == settings_table(), (
        "regenerate the README table: make docs")


@pytest.mark.parametrize("rel", list(GENERATED))
def test_the_generated_references_match_the_code(rel: str) -> None:
    assert (REPO / rel).read_text() == GENERATED[rel](), f"{rel} is out of date: make docs"
