"""Build the image and check the compose file with a real Docker engine, where one answers.

Skipped on machines without Docker (the offline checks in test_deploy_dockerfile.py and
test_deploy_compose.py cover the files there).
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.docker

ROOT = REPO
TAG = "loopwire:test-deploy"


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="module", autouse=True)
def docker() -> None:
    if not _docker_answers():
        pytest.skip("no Docker engine answers")


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_compose_config_is_accepted_by_docker_compose() -> None:
    result = run("docker", "compose", "-f", "docker-compose.yml", "config", "--quiet")
    assert result.returncode == 0, result.stderr


@pytest.mark.timeout(900)
def test_image_builds_and_runs_as_non_root() -> None:
    built = run("docker", "build", "-t", TAG, ".", timeout=880)
    assert built.returncode == 0, built.stderr[-4000:]
    try:
        help_ = run("docker", "run", "--rm", "--read-only", TAG, "--help")
        assert help_.returncode == 0, help_.stderr
        uid = run("docker", "run", "--rm", "--entrypoint", "id", TAG, "-u")
        assert uid.stdout.strip() == "10001"
    finally:
        run("docker", "image", "rm", "-f", TAG)
