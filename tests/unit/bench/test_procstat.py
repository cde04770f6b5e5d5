"""tests/bench/procstat.py: a server's forked children (Redis's AOF rewrite) count as its CPU.

Each case runs in a process of its own, so the children of this test process (servers
other tests started) stay out of the numbers."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.paths import REPO

pytestmark = pytest.mark.unit

BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"

SCRIPT = """
import json, os, subprocess, sys
from tests.bench.procstat import CpuWindow
burn = sys.argv[1]
me = os.getpid()
out = {}
window = CpuWindow({"redis-server": me, "bench client": me}).start()
# a child that ends within the window and is waited for (as Redis reaps its rewrite)
subprocess.run([sys.executable, "-c", burn], check=True)
# a child still running at the window's end, its burn done
live = subprocess.Popen([sys.executable, "-c", burn + "import sys; print('done', flush=True); sys.stdin.read()"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
assert live.stdout.readline().strip() == "done"
spent = window.stop()
out["with_children"], out["own"] = spent["redis-server"], spent["bench client"]
live.stdin.close()
live.wait()
print(json.dumps(out))
"""


def test_a_forking_server_is_charged_with_its_children_ended_and_running() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT, BURN], capture_output=True, text=True, cwd=REPO,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60, check=True)
    spent = json.loads(result.stdout)
    # two children of 0.3 s of CPU each (plus their interpreters' start-up), none of it the parent's own
    assert spent["with_children"] >= 0.55, spent
    assert spent["own"] < 0.2, spent
    assert spent["with_children"] - spent["own"] >= 0.5, spent
