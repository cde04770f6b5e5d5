"""Every subject of shared/contract/subjects.py is named in docs/protocol.md: the public
ones in their tables, the internal ones in "Internal subjects"."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.unit

PLACEHOLDER = re.compile(r"<[^>]+>|\{[^}]+\}")


def shape(subject: str) -> str:
    """`loopwire.ctl.{sid}.cancel` and `loopwire.ctl.<sid>.cancel` -> `loopwire.ctl.*.cancel`."""
    return PLACEHOLDER.sub("*", subject)


def subjects_in_code() -> set[str]:
    source = (REPO / "shared" / "contract" / "subjects.py").read_text()
    found = {shape("loopwire." + rest) for rest in re.findall(r'f"\{self\.prefix\}\.([^"]+)"', source)}
    # Left out: the wildcards subscribed with, the heads that parse a subject, and
    # `query(name)`'s generic `api.<name>`, whose every name has its own subject above.
    return {s for s in found if not s.endswith((".>", ".")) and "*.*" not in s and s != "loopwire.api.*"}


def subjects_in_doc() -> set[str]:
    text = (REPO / "docs" / "protocol.md").read_text()
    return {shape(s) for s in re.findall(r"`(loopwire\.[^`\s]+)`", text)}


def test_every_subject_is_in_the_protocol_page() -> None:
    code = subjects_in_code()
    assert len(code) >= 15, code
    missing = sorted(s for s in code if s not in subjects_in_doc())
    assert not missing, f"docs/protocol.md names no {missing}"
