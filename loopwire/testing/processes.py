"""One loopwire process of a test system (`loopwire up ...` or `loopwire serve NAME`):
started, waited for, killed, paused and restarted on its own.

A `LoopwireContainer` is one or more of these on a shared NATS and Redis (the layouts in
system.py). Each process gets its own free /metrics port (N adjacent ones for `up
--workers N`, whose worker i serves port + i) and its own log file.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from .servers import free_ports

PORT_TAKEN = "cannot serve /metrics on port"
"""What the launcher logs when its /metrics port is in use (loopwire/launcher.py)."""


class LoopwireProcess:
    def __init__(self, command: str, program: tuple[str, ...] | None = None) -> None:
        """`program`: how loopwire is run (default: this interpreter's `-m loopwire.cli`);
        another release's `bin/loopwire`, say, to run replicas of two releases together."""
        self.command = command
        self.program = program
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_port = 0
        self._env: dict[str, str] = {}
        self.log_path = Path(tempfile.mkstemp(prefix="loopwire-", suffix=".log")[1])

    @property
    def service(self) -> str:
        """`router` for `serve router`; `up` for every `up ...`."""
        words = self.command.split()
        return words[1] if words[0] == "serve" and len(words) > 1 else words[0]

    @property
    def workers(self) -> int:
        return workers_in(self.command)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def launch(self, env: dict[str, str]) -> None:
        """Start the process (not waiting for it to be ready)."""
        self._env = env
        self.metrics_port = self.metrics_port or free_ports(self.workers)
        env = {**env, "LOOPWIRE_METRICS_PORT": str(self.metrics_port)}
        args = [*(self.program or (sys.executable, "-m", "loopwire.cli")), *self.command.split()]
        log = open(self.log_path, "ab")  # noqa: SIM115 - the process owns it
        # Its own session: kill() takes the process group, `up --workers` children included.
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def ready_ports(self) -> list[int]:
        return [self.metrics_port + i for i in range(self.workers)]

    def wait_ready(self, deadline: float) -> None:
        """Until every worker of this process answers /readyz with 200. A free port taken by
        another process between its pick and the bind (parallel test workers pick theirs
        at the same time) is picked again, and the process started again on it."""
        for port in self.ready_ports():
            while True:
                if PORT_TAKEN in self.logs():
                    self.kill()
                    self.log_path.write_bytes(b"")
                    self.metrics_port = 0
                    self.launch(self._env)
                    return self.wait_ready(deadline)
                if self.proc is not None and self.proc.poll() is not None:
                    raise RuntimeError(f"`loopwire {self.command}` exited with {self.proc.returncode}:\n"
                                       f"{self.logs()[-4000:]}")
                # HTTPException: a probe of a port nothing listens on yet can connect to
                # itself (its ephemeral port chosen equal to the target) and read its own
                # request back as the answer; it is asked again.
                with contextlib.suppress(OSError, http.client.HTTPException):
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                        if resp.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"`loopwire {self.command}` not ready on :{port}:\n{self.logs()[-4000:]}")
                time.sleep(0.1)

    def signal_group(self, sig: signal.Signals) -> None:
        if self.running:
            assert self.proc is not None
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """kill -9 the process and its children: a crash, not a shutdown."""
        if self.running:
            assert self.proc is not None
            self.signal_group(signal.SIGKILL)  # a stopped (SIGSTOP) process dies as well
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the process holds its messages and does nothing (a GC pause, a frozen VM)."""
        self.signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal_group(signal.SIGCONT)

    def terminate(self, timeout: float) -> int:
        """SIGTERM and wait: a graceful shutdown. Returns the exit code."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.running:
            assert self.proc is not None
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def workers_in(command: str) -> int:
    """N of a `... --workers N` in the command, else 1."""
    words = command.split()
    for n, word in enumerate(words):
        if word == "--workers" and n + 1 < len(words) and words[n + 1].isdigit():
            return max(1, int(words[n + 1]))
        if word.startswith("--workers=") and word.split("=", 1)[1].isdigit():
            return max(1, int(word.split("=", 1)[1]))
    return 1
