"""Runs `lint-imports` (import-linter) on loopwire as its import names lay it out.

The contracts (pyproject.toml, `[tool.importlinter]`) say that shared/ runs one way
(contract <- stores <- runtime <- observability <- services), that no service imports
another, that the router core imports no I/O library, and that the modules of the router
and of llm import each other without cycles.

loopwire's packages do not sit in one folder: pyproject's package-dir maps
`loopwire.shared` to shared/ and each service to services/<name>/. grimp, the graph
builder of import-linter, finds a package's modules by walking its folder, so on the
repository it would see loopwire/ alone. This lays out, in a temporary folder, a
`loopwire/` of symlinks shaped like the import names (grimp follows symlinks), and runs
`lint-imports` there with the repository's contracts.

    python -m tests.import_contracts      # `make lint`; tests/unit/test_import_contracts.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def lay_out(root: Path, into: Path) -> Path:
    """A `loopwire/` package under `into` whose folders are the package-dir mapping of
    root's pyproject.toml, as symlinks into `root`."""
    mapping: dict[str, str] = tomllib.loads((root / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["package-dir"]
    package = into / "loopwire"
    package.mkdir()
    for child in (root / mapping["loopwire"]).iterdir():
        if child.name != "__pycache__":
            (package / child.name).symlink_to(child)
    for name, folder in mapping.items():
        if name == "loopwire":
            continue
        link = package.joinpath(*name.split(".")[1:])
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(root / folder, target_is_directory=True)
    return package


def run(root: Path = ROOT, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
    """`lint-imports` against the laid-out package. lint-imports puts its working directory
    first on sys.path, so it runs in the temporary folder, where `loopwire` is the layout."""
    with tempfile.TemporaryDirectory(prefix="loopwire-imports-") as tmp:
        lay_out(root, Path(tmp))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")])))
        command = [str(Path(sys.executable).parent / "lint-imports"), str(root / "pyproject.toml"), "--no-cache",
                   "--no-logo"]
        return subprocess.run(command, cwd=tmp, env=env, text=True, capture_output=capture, timeout=300)


def main() -> int:
    return run().returncode


if __name__ == "__main__":
    sys.exit(main())
