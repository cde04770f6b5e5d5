"""Loaded by every Python process started with this folder on PYTHONPATH
(tests/bench/timeline.py): notes each nats-py socket write and read and each write and read
of the script channel (shared/stores/script_channel.py), with the monotonic clock (one
clock for every process) and the process's CPU. SIGUSR2 starts the notes afresh, SIGUSR1
writes them to LW_BENCH_TIMELINE/<pid>.tsv. Inert unless that variable is set."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

OUT = os.environ.get("LW_BENCH_TIMELINE")

if OUT:
    from nats.aio import transport
    from nats.protocol import parser

    out_dir: str = OUT
    notes: list[tuple[float, float, str, str]] = []

    def note(kind: str, data: bytes) -> None:
        first = bytes(data[:90]).split(b"\r\n")[0].decode("latin1")
        notes.append((time.perf_counter(), time.process_time(), kind, first))

    _writelines = transport.TcpTransport.writelines

    def writelines(self: Any, payload: list[bytes]) -> None:
        for part in payload:
            note("nats>", part)
        _writelines(self, payload)

    _parse = parser.Parser.parse

    async def parse(self: Any, data: bytes = b"") -> None:
        note("nats<", data)
        await _parse(self, data)

    transport.TcpTransport.writelines = writelines  # type: ignore[method-assign]
    parser.Parser.parse = parse  # type: ignore[method-assign]

    from loopwire.shared.stores import script_channel

    _flush = script_channel._Link._flush
    _received = script_channel._Link.data_received

    def flush(self: Any) -> None:
        if self._out:
            note("redis>", b"%d calls: " % len(self._out) + self._out[0][:60].replace(b"\r\n", b" "))
        _flush(self)

    def data_received(self: Any, data: bytes) -> None:
        note("redis<", data.replace(b"\r\n", b" "))
        _received(self, data)

    script_channel._Link._flush = flush  # type: ignore[method-assign]
    script_channel._Link.data_received = data_received  # type: ignore[method-assign]

    def start(*_: Any) -> None:
        notes.clear()

    def write(*_: Any) -> None:
        path = os.path.join(out_dir, f"{os.getpid()}.tsv")
        with open(path + ".part", "w") as f:
            for at, cpu, kind, what in notes:
                f.write(f"{at:.6f}\t{cpu:.6f}\t{kind}\t{what}\n")
        os.replace(path + ".part", path)

    def wrap(spec: str) -> None:
        """`module:Name.attr`: each call of that function noted on entry and exit."""
        import functools
        import importlib
        import inspect

        module_name, path = spec.split(":")
        owner: Any = importlib.import_module(module_name)
        *parents, attr = path.split(".")
        for parent in parents:
            owner = getattr(owner, parent)
        fn = getattr(owner, attr)
        label = path.encode()

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def noted_async(*args: Any, **kwargs: Any) -> Any:
                note("call>", label)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    note("call<", label)
            setattr(owner, attr, noted_async)
        else:
            @functools.wraps(fn)
            def noted(*args: Any, **kwargs: Any) -> Any:
                note("call>", label)
                try:
                    return fn(*args, **kwargs)
                finally:
                    note("call<", label)
            setattr(owner, attr, noted)

    for spec in filter(None, os.environ.get("LW_BENCH_TIMELINE_WRAP", "").split(",")):
        try:
            wrap(spec)
        except (ImportError, AttributeError):
            pass  # not in this process's code

    signal.signal(signal.SIGUSR2, start)
    signal.signal(signal.SIGUSR1, write)
