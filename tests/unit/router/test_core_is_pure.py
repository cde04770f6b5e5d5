"""No module under services/router/core/ imports I/O: every `import` and `from ... import`
of each module (at its top and inside its functions), read from its syntax tree, is checked
against a list of the libraries that reach a network, a store, a file or a process, and
against the shell. pyproject's import contract checks the same folder through the import
graph for the third-party libraries; this one also covers the standard library's, which
that graph does not hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

CORE = Path(__file__).resolve().parents[3] / "services/router/core"

FORBIDDEN = frozenset({
    # the network and the stores
    "redis", "nats", "faststream", "httpx", "anthropic", "mcp", "urllib", "http", "socket", "ssl", "asyncio",
    "aiohttp", "requests", "websockets", "uvicorn", "starlette",
    # files, processes and the environment
    "os", "pathlib", "shutil", "tempfile", "glob", "io", "subprocess", "dulwich", "sqlite3", "pickle", "shelve",
    # loopwire's own I/O
    "loopwire.shared.stores", "loopwire.shared.observability", "loopwire.shared.runtime.bus",
    "loopwire.shared.runtime.chain", "loopwire.shared.runtime.service_context", "loopwire.router.shell",
})
"""A module is forbidden with every module under it (`os` forbids `os.path`)."""


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module `path` imports, absolute (a relative import is resolved against
    loopwire.router.core, where the folder is installed)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                package = ["loopwire", "router", "core"][: 3 - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def _forbidden(module: str) -> str | None:
    return next((f for f in FORBIDDEN if module == f or module.startswith(f + ".")), None)


def test_no_core_module_imports_io() -> None:
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) > 30, "the core folder is where the router's modules are"
    offences = [f"{path.name}:{line} imports {module} ({rule})"
                for path in modules for line, module in _imports(path)
                if (rule := _forbidden(module)) is not None]
    assert not offences, "\n".join(offences)


def test_the_check_sees_each_kind_of_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os.path\nfrom pathlib import Path\nfrom ..shell import service\n"
                      "def f():\n    import redis.asyncio\n    from .state import RunState\n")
    flagged = {module for _, module in _imports(sample) if _forbidden(module)}
    assert flagged == {"os.path", "pathlib", "pathlib.Path", "loopwire.router.shell",
                       "loopwire.router.shell.service", "redis.asyncio"}
