"""The wheel built from this tree, installed into fresh venvs as a user would install it
(tests/e2e/test_wheel_install.py: no extras; tests/e2e/test_testing_extra.py: `[testing]`).

Dependencies come from the configured package index through pip's cache, so after the
first run an install takes seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_USER")})
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def build_wheel(root: Path) -> Path:
    """The loopwire wheel of this tree, built under `root`."""
    dist = root / "dist"
    # Built from a clean copy: setuptools builds in the source tree, and a build/ left
    # there by an earlier build could put modules deleted since into the wheel.
    source = root / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".run", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", "node_modules"))
    run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(dist)], root, 240)
    wheels = sorted(dist.glob("loopwire-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def fresh_venv(root: Path, wheel: Path, extras: str = "") -> Path:
    """A new venv under `root` with the wheel (and `extras`, e.g. "testing") and what it
    declares; returns its bin directory."""
    venv = root / "venv"
    run([sys.executable, "-m", "venv", str(venv)], root, 120)
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", target], root, 480)
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import loopwire; print(loopwire.__file__)"],
                           cwd=root, capture_output=True, text=True, check=True)
    assert str(venv) in probe.stdout, f"loopwire imported from outside the venv: {probe.stdout}"
    return venv / "bin"
