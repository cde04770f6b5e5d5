"""The release is one number: pyproject's version is what `loopwire.__version__` and
`loopwire --version` print, the chart's appVersion, and CHANGELOG.md's newest entry;
deploy/previous-release names a commit of this repository."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest
import yaml

import loopwire
from tests.paths import REPO

pytestmark = pytest.mark.unit


def project_version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def test_every_place_names_the_same_release() -> None:
    version = project_version()
    assert loopwire.__version__ == version
    out = subprocess.run([sys.executable, "-m", "loopwire.cli", "--version"], capture_output=True, text=True)
    assert out.stdout.strip() == f"loopwire {version}", out.stderr
    chart = yaml.safe_load((REPO / "helm" / "loopwire" / "Chart.yaml").read_text())
    assert chart["appVersion"] == version
    newest = re.search(r"^## (\S+)", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert newest is not None and newest.group(1) == version


def test_the_previous_release_is_named() -> None:
    lines = [ln for ln in (REPO / "deploy" / "previous-release").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    (line,) = lines
    version, commit = line.split()
    assert re.fullmatch(r"[0-9a-f]{40}", commit) and version != project_version()
    assert f"## {version}" in (REPO / "CHANGELOG.md").read_text()
