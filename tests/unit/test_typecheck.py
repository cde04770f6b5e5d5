"""mypy passes over the whole of loopwire, seeing the types across its packages, and it
does see them: a call that breaks a signature in another package is an error.

`make lint` runs the same check (tests/typecheck.py); running it here makes `make test`
enforce it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.typecheck import ROOT, run

pytestmark = pytest.mark.unit


def test_mypy_passes_over_the_laid_out_package() -> None:
    result = run(capture=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


def test_a_call_across_packages_is_checked(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for folder in ("loopwire", "shared", "services"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    # The llm service calling into shared/contract with an argument of the wrong type.
    target = root / "services/llm/errors.py"
    target.write_text(target.read_text() + "\n\nfrom loopwire.shared.contract import keys as _keys\n"
                      "_WRONG: int = _keys.session_state('s')\n")
    result = run(root, capture=True)
    assert result.returncode != 0
    assert "loopwire/llm/errors.py" in result.stdout and "[assignment]" in result.stdout, result.stdout
