"""Every folder of Python code that ships is a package the wheel lists: a package left out
of pyproject's `[tool.setuptools] packages` works in the editable install of the suite and
is missing from the wheel users install (the wheel e2e tests catch it, minutes later)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_every_code_folder_is_a_listed_package() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(tool["packages"])
    folders = {name: ROOT / path for name, path in tool["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            relative = init.parent.relative_to(folder)
            if "__pycache__" in relative.parts or "node_modules" in relative.parts:
                continue
            found.add(".".join((name, *relative.parts)))
    assert found - listed == set(), "packages the wheel would leave out"
    assert listed - found == set(), "listed packages with no folder"
