"""The import contracts of pyproject.toml hold, and each of them catches a violation.

`make lint` runs the same check (tests/import_contracts.py); running it here too makes
`make test` enforce the layers, the independence of the services, the I/O-free router
core and the acyclic modules of the router and llm.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from tests.import_contracts import ROOT, run

pytestmark = pytest.mark.unit

CONTRACTS = (
    "layers run one way: contract <- stores <- runtime <- observability <- services",
    "no service imports another",
    "the router core imports no I/O library",
    "the modules of the router and of llm import each other without cycles",
)


def test_the_contracts_hold() -> None:
    result = run(capture=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in CONTRACTS:
        assert f"{name} KEPT" in result.stdout, result.stdout
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout
    assert "ignored" not in result.stdout, "no contract has exceptions"


def test_the_io_free_contract_names_the_router_core_folder() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (io_free,) = [c for c in contracts if c["name"] == "the router core imports no I/O library"]
    assert io_free["source_modules"] == ["loopwire.router.core"]
    loose = sorted(p.name for p in (ROOT / "services/router").glob("*.py") if p.stem != "__init__")
    assert not loose, f"every router module is in core/ (pure) or shell/ (I/O): {loose}"


def _copy_of_the_code(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    for folder in ("loopwire", "shared", "services"):
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", "node_modules"))
    return root


def _append(path: Path, line: str) -> None:
    path.write_text(path.read_text() + f"\n{line}\n")


def test_each_contract_catches_a_violation(tmp_path: Path) -> None:
    root = _copy_of_the_code(tmp_path)
    _append(root / "shared/contract/codec.py", "from loopwire.shared.observability import metrics  # noqa")
    _append(root / "services/tools/registry.py", "from loopwire.llm import errors  # noqa")
    _append(root / "services/router/core/state.py", "import redis  # noqa")
    _append(root / "services/router/core/phases.py", "from loopwire.router.core import profiles  # noqa")
    result = run(root, capture=True)
    assert result.returncode != 0
    for name in CONTRACTS:
        assert f"{name} BROKEN" in result.stdout, result.stdout
    assert "loopwire.shared.contract.codec -> loopwire.shared.observability" in result.stdout
    assert "loopwire.tools.registry -> loopwire.llm.errors" in result.stdout
    assert "loopwire.router.core.state -> redis" in result.stdout
    assert "No cycles are allowed in loopwire.router.core." in result.stdout
