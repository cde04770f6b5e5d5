"""Runs mypy on loopwire as its import names lay it out, so it sees every module's types.

loopwire's packages live in several folders (pyproject's package-dir maps `loopwire.shared`
to shared/ and each service to services/<name>/), and the editable install reaches them
through an import hook that mypy cannot follow. Run on the folders, mypy names a module by
its path (`llm.limiter`, `runtime.chain`) and cannot find `loopwire.shared...`: with
`ignore_missing_imports` every import across packages is then `Any`, and a call that does
not match its callee's signature passes unseen. Laid out the way tests/import_contracts.py
lays it out for import-linter (a `loopwire/` of symlinks), every `loopwire.*` import
resolves to its source.

    python -m tests.typecheck      # `make lint`; tests/unit/test_typecheck.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.import_contracts import ROOT, lay_out


def run(root: Path = ROOT, *, capture: bool = False) -> subprocess.CompletedProcess[str]:
    """mypy over the laid-out package, with the repository's configuration. Paths in its
    report are those of the layout (`loopwire/llm/limiter.py` is services/llm/limiter.py)."""
    with tempfile.TemporaryDirectory(prefix="loopwire-typecheck-") as tmp:
        lay_out(root, Path(tmp))
        command = [str(Path(sys.executable).parent / "mypy"), "--config-file", str(root / "pyproject.toml"),
                   "--cache-dir", os.devnull, "-p", "loopwire"]
        return subprocess.run(command, cwd=tmp, text=True, capture_output=capture, timeout=600)


def main() -> int:
    return run().returncode


if __name__ == "__main__":
    sys.exit(main())
