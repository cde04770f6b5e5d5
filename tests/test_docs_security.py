"""docs/security.md stays true to deploy/nats/users.conf and is linked from the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
SECURITY = (ROOT / "docs" / "security.md").read_text()
USERS = (ROOT / "deploy" / "nats" / "users.conf").read_text()


def test_linked_from_the_readme() -> None:
    assert "(docs/security.md)" in (ROOT / "README.md").read_text()


def test_every_user_and_every_subject_of_users_conf_is_documented() -> None:
    users = re.findall(r"\{user: ([\w-]+),", USERS)
    assert users == ["loopwire-services", "loopwire-client", "loopwire-provider"]
    for user in users:
        assert f"`{user}`" in SECURITY
    subjects = re.findall(r'^\s*"([^"]+)"', USERS, re.M)
    assert "loopwire.in.>" in subjects and "$SRV.>" in subjects
    for subject in subjects:
        assert f"`{subject}`" in SECURITY or f"`{subject.removesuffix('.>')}` (and `.>`)" in SECURITY, subject


def test_owasp_llm_top_ten_is_covered() -> None:
    for n in range(1, 11):
        assert f"**LLM{n:02d} " in SECURITY
