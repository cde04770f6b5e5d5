"""docs/profiles.md's table "Where loopwire follows the designs and where it differs" has
exactly the rows services/router/core/design_differences.py lists, in its order, none silent."""

from __future__ import annotations

import re

import pytest

from loopwire.router.core.design_differences import DESIGN_DIFFERENCES
from tests.paths import REPO

pytestmark = pytest.mark.unit

SECTION = "## Where loopwire follows the designs and where it differs"


def table_rows() -> list[list[str]]:
    text = (REPO / "docs" / "profiles.md").read_text()
    section = text[text.index(SECTION) + len(SECTION):]
    end = re.search(r"^## ", section, re.MULTILINE)
    section = section[:end.start()] if end else section
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in rows]


def test_the_table_has_a_row_per_listed_difference_in_order() -> None:
    ids = [cells[0].strip("`") for cells in table_rows()]
    assert ids == list(DESIGN_DIFFERENCES)


def test_no_row_is_silent() -> None:
    for cells in table_rows():
        assert len(cells) == 4, f"{cells[0]}: id, the design says, loopwire does, why"
        assert all(cells[1:4]), f"{cells[0]}: says what the design says, what loopwire does, and why"


def test_each_row_names_where_it_is_carried_out() -> None:
    missing = {k: v for k, v in DESIGN_DIFFERENCES.items() if not (REPO / v).exists()}
    assert not missing
