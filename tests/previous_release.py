"""The previous release (deploy/previous-release), built once per machine for the upgrade
test: its source taken from this repository's history (`git archive`), installed with its
own dependencies into a venv of its own, under ~/.cache/loopwire/releases/<commit>
($XDG_CACHE_HOME if set), outside the checkout, so a clean clone reuses it. Building it
takes about 20 s; a file lock keeps two test workers from building it at once."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.paths import REPO


def named() -> tuple[str, str]:
    """(version, commit) of the release before this one."""
    lines = [ln.split() for ln in (REPO / "deploy" / "previous-release").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    (version, commit), = lines
    return version, commit


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "loopwire" / "releases"


def built(commit: str) -> Path:
    """The `loopwire` program of release `commit`, built if it is not yet."""
    home = cache_dir() / commit
    program = home / "venv" / "bin" / "loopwire"
    stamp = home / "built"
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and program.exists():
            return program
        for part in ("src", "venv"):
            shutil.rmtree(home / part, ignore_errors=True)
        (home / "src").mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=False)
        if archive.returncode != 0:
            raise RuntimeError(f"release {commit} is not in this repository's history "
                               f"(a shallow clone?): {archive.stderr.decode()[-500:]}")
        subprocess.run(["tar", "-x", "-C", str(home / "src")], input=archive.stdout, check=True)
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        install = subprocess.run([str(home / "venv" / "bin" / "pip"), "install", "-q", str(home / "src")],
                                 capture_output=True, text=True, check=False)
        if install.returncode != 0:
            raise RuntimeError(f"installing release {commit} failed:\n{install.stdout[-2000:]}{install.stderr[-2000:]}")
        stamp.write_text(commit)
        return program
