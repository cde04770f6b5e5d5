"""docs/services/<name>.md stays true to the code: its module table names every module of
the service's folder (and of its packages, or the package) and no other, and every source path the architecture pages name
exists."""

from __future__ import annotations

import re

import pytest

from tests.paths import REPO

SERVICES = ("router", "llm", "tools", "memory", "transcripts")
PAGES = [REPO / "docs" / "architecture.md", *(REPO / "docs" / "services" / f"{s}.md" for s in SERVICES)]


def table_modules(page: str) -> set[str]:
    """The module names in the first column of the page's "Reading the code" table."""
    section = page.split("## Reading the code", 1)[1].split("\n## ", 1)[0]
    names: set[str] = set()
    for row in section.splitlines():
        if row.startswith("| ") and not row.startswith("| module") and not row.startswith("|---"):
            names.update(name.strip() for name in row.split("|")[1].split(","))
    return names


@pytest.mark.parametrize("service", SERVICES)
def test_the_page_names_every_module_of_the_service(service: str) -> None:
    folder = REPO / "services" / service
    modules = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
    page = (REPO / "docs" / "services" / f"{service}.md").read_text()
    named = table_modules(page)
    for package in (p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        # a package is one row (`executors/`), or the page names each of its modules (`core/decide.py`)
        inside = {f"{package.name}/{m.name}" for m in package.glob("*.py") if m.name != "__init__.py"}
        modules |= inside if any(n.startswith(f"{package.name}/") and n != f"{package.name}/" for n in named) else {f"{package.name}/"}
    assert named == modules, f"docs/services/{service}.md, 'Reading the code'"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_source_path_named_exists(page: object) -> None:
    text = page.read_text()  # type: ignore[attr-defined]
    paths = set(re.findall(r"(?<![\w/.])((?:shared|services|loopwire|tests)/[\w/]+\.py)\b", text))
    assert paths, "the page names source files"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"{page}: {missing}"
